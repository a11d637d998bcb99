package daemon

import (
	"context"

	"octosup/policy"
	"octosup/supervisor"
)

// Apps is what the daemon needs of the supervisor: *supervisor.Supervisor,
// or a fake in tests.
type Apps interface {
	Apply(ctx context.Context, m *policy.Manifest, opt supervisor.ApplyOptions) (supervisor.Applied, error)
	Start(ctx context.Context, id string) (supervisor.AppStatus, error)
	Stop(ctx context.Context, id string) (supervisor.AppStatus, error)
	Restart(ctx context.Context, id string) (supervisor.AppStatus, error)
	Status(id string) ([]supervisor.AppStatus, error)
	// Usage reads the counters of the app's leaf (nil: it runs in none).
	Usage(id string) (*supervisor.Usage, error)
	Logs(id string, n int) ([]supervisor.LogLine, error)
	// FollowLogs calls join with the last n lines of the app, under the
	// lock that orders its lines: the events of the lines after go out
	// once join returns (supervisor.Supervisor.FollowLogs).
	FollowLogs(id string, n int, join func([]supervisor.LogLine)) error
	// CheckCaller returns nil only when the process is positively outside
	// every app (a *supervisor.CallerError otherwise): the control socket
	// serves no other.
	CheckCaller(p supervisor.Caller) error
	// Entry is the app's manifest entry and the manifest's developer
	// mode, from which its next start's jail is compiled.
	Entry(id string) (app policy.App, developerMode, ok bool)
	// Entries are the manifest's entries, the neighbours an app's jail
	// is compiled against; the caller only reads them.
	Entries() []policy.App
	// Ping returns nil once every part of the supervisor (its spawner
	// thread, each app's runner) answered within ctx: the watchdog's
	// proof that it is not wedged.
	Ping(ctx context.Context) error
}
