package daemon

import (
	"context"

	"octosup/policy"
	"octosup/supervisor"
)

// Apps is what the daemon needs of *supervisor.Supervisor (tests: a fake).
type Apps interface {
	Apply(ctx context.Context, m *policy.Manifest, opt supervisor.ApplyOptions) (supervisor.Applied, error)
	Start(ctx context.Context, id string) (supervisor.AppStatus, error)
	Stop(ctx context.Context, id string) (supervisor.AppStatus, error)
	Restart(ctx context.Context, id string) (supervisor.AppStatus, error)
	Status(id string) ([]supervisor.AppStatus, error)
	// Usage reads the counters of the app's leaf (nil: it runs in none).
	Usage(id string) (*supervisor.Usage, error)
	Logs(id string, n int) ([]supervisor.LogLine, error)
	// FollowLogs calls join with the app's last n lines under the lock
	// that orders them: the events of later lines follow join.
	FollowLogs(id string, n int, join func([]supervisor.LogLine)) error
	// CheckCaller returns nil only for a process positively outside every
	// app (else a *supervisor.CallerError).
	CheckCaller(p supervisor.Caller) error
	// Entry is the app's manifest entry and the manifest's developer
	// mode, from which its next jail is compiled.
	Entry(id string) (app policy.App, developerMode, ok bool)
	// Entries are the neighbours a jail is compiled against; read only.
	Entries() []policy.App
	// Ping returns nil once the spawner thread and each app's runner
	// answered within ctx (the watchdog's proof).
	Ping(ctx context.Context) error
}
