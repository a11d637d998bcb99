package daemon

import (
	"fmt"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"
)

// NewLogger returns the daemon's logger writing to w at level ("debug",
// "info", "warn", "error"): a human console format when w is a terminal,
// JSON otherwise (the journal, files, pipes).
func NewLogger(w *os.File, level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	var enc zapcore.Encoder
	if isTerminal(w) {
		cfg := zap.NewDevelopmentEncoderConfig()
		cfg.EncodeLevel = zapcore.CapitalColorLevelEncoder
		enc = zapcore.NewConsoleEncoder(cfg)
	} else {
		cfg := zap.NewProductionEncoderConfig()
		cfg.EncodeTime = zapcore.RFC3339NanoTimeEncoder
		enc = zapcore.NewJSONEncoder(cfg)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(w), lvl), zap.ErrorOutput(zapcore.Lock(w))), nil
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
