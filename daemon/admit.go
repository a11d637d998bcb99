package daemon

import (
	"encoding/json"
	"fmt"
	"net"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"octosup/control"
	"octosup/supervisor"
)

// admit checks a new connection's peer (doc.go): a refused one gets a
// not_permitted line saying why and is closed. It returns the
// connection's logger, naming the peer.
func (s *Server) admit(nc net.Conn, accepted time.Duration) (*zap.Logger, bool) {
	log := s.log
	p, proc, err := peerCred(nc, s.peerPidfd)
	if err != nil {
		log.Warn("refuse control connection: no peer credentials", zap.Error(err))
		nc.Close()
		return nil, false
	}
	log = log.With(zap.Int("peer_pid", int(p.Pid)), zap.Uint32("peer_uid", p.Uid))
	why := s.refuse(p, proc, accepted)
	proc.close()
	if why != "" {
		log.Warn("refuse control connection", zap.String("why", why), zap.String("peer_pidfd", proc.how))
		line, _ := json.Marshal(control.Response{Error: control.Errorf(control.CodeNotPermitted, "%s", why)})
		nc.SetWriteDeadline(time.Now().Add(time.Second))
		nc.Write(append(line, '\n'))
		nc.Close()
		return nil, false
	}
	return log, true
}

// refuse says why a peer may not use the socket ("" when it may).
// accepted is the accept's CLOCK_BOOTTIME, by which the peer had started.
func (s *Server) refuse(p *unix.Ucred, proc peerProc, accepted time.Duration) string {
	if int(p.Uid) != s.uid {
		return fmt.Sprintf("uid %d may not use this control socket: octosupd serves only uid %d", p.Uid, s.uid)
	}
	const apps = "supervised apps may not use the control socket, and a peer not shown to be outside every app is taken for one"
	if proc.err != nil {
		return fmt.Sprintf("process %d cannot be placed outside every app: %v: %s", p.Pid, proc.err, apps)
	}
	if proc.how == "pidfd_open" {
		s.fallbackOnce.Do(func() {
			s.log.Warn("this kernel has no SO_PEERPIDFD (Linux 6.5): control socket peers are found by pid; a pid reused between a peer's connect and its accept could be taken for the peer")
		})
	}
	if err := s.cfg.Apps.CheckCaller(supervisor.Caller{Pid: int(p.Pid), Pidfd: proc.pidfd, StartedBy: accepted}); err != nil {
		return fmt.Sprintf("%v: %s", err, apps)
	}
	return ""
}
