package daemon

import (
	"fmt"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/buffer"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"

	"octosup/internal/visible"
)

// NewLogger returns the daemon's logger writing to w at level ("debug",
// "info", "warn", "error"): JSON records unless w is a terminal (make
// run); there, zap's console form with the time of day, and each app
// line as "15:04:05.000 notes [stderr]: text", rendered visibly.
func NewLogger(w *os.File, level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	var enc zapcore.Encoder
	if _, err := unix.IoctlGetTermios(int(w.Fd()), unix.TCGETS); err == nil { // a terminal
		cfg := zap.NewDevelopmentEncoderConfig()
		cfg.EncodeTime = zapcore.TimeEncoderOfLayout(terminalTime)
		cfg.EncodeLevel = zapcore.CapitalColorLevelEncoder
		enc = terminalEncoder{Encoder: zapcore.NewConsoleEncoder(cfg), pool: buffer.NewPool()}
	} else {
		cfg := zap.NewProductionEncoderConfig()
		cfg.EncodeTime = zapcore.RFC3339NanoTimeEncoder
		enc = zapcore.NewJSONEncoder(cfg)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(w), lvl), zap.ErrorOutput(zapcore.Lock(w))), nil
}

// terminalTime: a person watching needs the time of day only.
const terminalTime = "15:04:05.000"

// appOutput is the message of the supervisor's record of an app's line,
// with fields app, stream and text (TestTerminalLog holds both packages
// to it).
const appOutput = "app output"

// terminalEncoder is zap's console encoder but for app output, printed
// as octosupctl logs does, visibly: an app's escapes must not drive the
// daemon's terminal.
type terminalEncoder struct {
	zapcore.Encoder
	pool buffer.Pool
}

func (e terminalEncoder) Clone() zapcore.Encoder {
	return terminalEncoder{Encoder: e.Encoder.Clone(), pool: e.pool}
}

func (e terminalEncoder) EncodeEntry(ent zapcore.Entry, fields []zapcore.Field) (*buffer.Buffer, error) {
	if ent.Message != appOutput {
		return e.Encoder.EncodeEntry(ent, fields)
	}
	var app, stream, text string
	have := 0
	for _, f := range fields {
		if f.Type != zapcore.StringType {
			continue
		}
		switch f.Key {
		case "app":
			app, have = f.String, have|1
		case "stream":
			stream, have = f.String, have|2
		case "text":
			text, have = f.String, have|4
		}
	}
	if have != 7 {
		return e.Encoder.EncodeEntry(ent, fields) // not the record it looks like
	}
	b := e.pool.Get()
	b.AppendTime(ent.Time, terminalTime)
	b.AppendByte(' ')
	b.AppendString(visible.String(app))
	if stream != "stdout" {
		b.AppendString(" [" + visible.String(stream) + "]")
	}
	b.AppendString(": ")
	b.AppendString(visible.String(text))
	b.AppendByte('\n')
	return b, nil
}
