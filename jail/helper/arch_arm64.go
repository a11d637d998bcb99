package helper

import "golang.org/x/sys/unix"

// nativeAuditArch is what seccomp_data.arch holds for this build's
// syscalls.
const nativeAuditArch = unix.AUDIT_ARCH_AARCH64
