package policy

// The manifest's wire shape (docs/manifest.md). Field tags are the contract; the
// validator (validate.go) rejects anything the tags do not name.

// Manifest is a parsed and validated native-apps.json.
type Manifest struct {
	Version       int   `json:"version"`
	DeveloperMode bool  `json:"developer_mode,omitempty"`
	Apps          []App `json:"apps"`
}

// App is one entry of the manifest.
type App struct {
	ID        string            `json:"id"`
	Name      string            `json:"name,omitempty"`
	Exec      []string          `json:"exec"`
	Resources []string          `json:"resources,omitempty"`
	Autostart bool              `json:"autostart,omitempty"`
	Restart   RestartPolicy     `json:"restart,omitempty"`
	Grants    Grants            `json:"grants"`
	Sandbox   Sandbox           `json:"sandbox"`
	Storage   Storage           `json:"storage"`
	Env       map[string]string `json:"env,omitempty"`
	// PassEnv names variables of the daemon's environment a jail app
	// gets (besides the few every app gets): a jail app's environment is
	// an allow list, so that what a terminal exported (SSH_AUTH_SOCK, a
	// cloud token) stays out. A broad app gets the daemon's whole
	// environment, minus the reserved names, and needs none.
	PassEnv []string `json:"pass_env,omitempty"`
	// Limits bound what the app's processes use together (limits.go).
	Limits ResourceLimits `json:"limits"`
}

// RestartPolicy says what the supervisor does when an app's process ends
// without having been asked to.
type RestartPolicy string

const (
	// RestartOnRequest keeps a crashed app stopped until a person or the
	// shell restarts it. It is the default.
	RestartOnRequest RestartPolicy = "on-request"
	// RestartOnFailure restarts an app that exited non-zero or by a signal,
	// with exponential backoff and a start limit.
	RestartOnFailure RestartPolicy = "on-failure"
)

// Grants are what an app may use of the agent service.
type Grants struct {
	Services []string `json:"services,omitempty"`
	Methods  []string `json:"methods,omitempty"`
	Tools    []string `json:"tools,omitempty"`
}

// SandboxPolicy chooses how far the jail narrows an app.
type SandboxPolicy string

const (
	PolicyJail  SandboxPolicy = "jail"
	PolicyBroad SandboxPolicy = "broad"
)

// Network chooses what sockets an app may open.
type Network string

const (
	NetworkNone Network = "none"
	NetworkTCP  Network = "tcp"
	NetworkFull Network = "full"
)

// Access is the right an external path is granted with.
type Access string

const (
	AccessRO Access = "ro"
	AccessRW Access = "rw"
)

// Sandbox is the jail an app runs in (docs/jail.md).
type Sandbox struct {
	Policy     SandboxPolicy `json:"policy"`
	Network    Network       `json:"network"`
	TCPConnect []uint16      `json:"tcp_connect,omitempty"`
	TCPBind    []uint16      `json:"tcp_bind,omitempty"`
	// Processes is a pointer so that "absent" (default true) and an
	// explicit false stay apart.
	Processes *bool      `json:"processes,omitempty"`
	Accounts  []string   `json:"accounts,omitempty"`
	External  []External `json:"external,omitempty"`
	// Sockets are the desktop sockets the app may reach (SocketWayland,
	// …), flatpak's names; Devices the device groups (DeviceDRI). Only a
	// jail app has them (docs/jail.md, "Desktop sockets and devices").
	Sockets []string `json:"sockets,omitempty"`
	Devices []string `json:"devices,omitempty"`
	// Strictness overrides the daemon's jail strictness for this app:
	// "best-effort" or "strict" (see docs/jail.md).
	Strictness string `json:"strictness,omitempty"`
}

// Desktop sockets and devices a manifest may grant (docs/manifest.md).
const (
	SocketWayland    = "wayland"
	SocketPulseAudio = "pulseaudio"
	DeviceDRI        = "dri"
)

// KnownSockets returns the sockets a manifest may grant, in a fixed order.
func KnownSockets() []string { return []string{SocketWayland, SocketPulseAudio} }

// KnownDevices returns the device groups a manifest may grant.
func KnownDevices() []string { return []string{DeviceDRI} }

// MayCreateProcesses reports whether the app may fork and exec.
func (s Sandbox) MayCreateProcesses() bool { return s.Processes == nil || *s.Processes }

// External is an extra path outside the jail an app may use.
type External struct {
	Path   string `json:"path"`
	Access Access `json:"access"`
}

// Storage asks for the app's private directories.
type Storage struct {
	Jail    bool `json:"jail,omitempty"`
	Secrets bool `json:"secrets,omitempty"`
}

// ServiceAgent is the only service a manifest may grant today.
const ServiceAgent = "agent.octos"

// Methods an app may be granted (docs/protocol.md, "Methods").
const (
	MethodSessionOpen    = "octos.session.open"
	MethodSessionHistory = "octos.session.history"
	MethodTurnStart      = "octos.turn.start"
	MethodTurnInterrupt  = "octos.turn.interrupt"
	MethodContextClose   = "octos.context.close"
)

// KnownMethods returns the methods of docs/protocol.md, in a fixed order.
func KnownMethods() []string {
	return []string{MethodSessionOpen, MethodSessionHistory, MethodTurnStart, MethodTurnInterrupt, MethodContextClose}
}

// App returns the entry with the given id.
func (m *Manifest) App(id string) (App, bool) {
	for _, a := range m.Apps {
		if a.ID == id {
			return a, true
		}
	}
	return App{}, false
}
