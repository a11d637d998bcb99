package daemon

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"octosup/control"
	"octosup/jail"
)

// TestJailOp: the jail op compiles an app's spec from the supervisor's
// current entry with the daemon's own launcher and environment, so what
// it shows follows narrowing (OCTOSUP_SANDBOX_NARROW in the daemon's
// environment) and the manifest's developer mode after a reload.
func TestJailOp(t *testing.T) {
	env := newTestEnv(t)
	env.vars["OCTOSUP_SANDBOX_NARROW"] = "idle"
	env.installManifest(t, "two-apps.json")
	d := startDaemon(t, env)
	ctx := context.Background()

	// The jail op's answer, control.JailData, with its spec decoded.
	type jailData struct {
		Spec jail.Spec `json:"spec"`
		Text string    `json:"text"`
	}
	jailOf := func(app string) (jailData, error) {
		var data jailData
		err := d.client.Do(ctx, control.OpJail, control.AppArgs{App: app}, &data)
		return data, err
	}
	talker, err := jailOf("talker")
	if err != nil {
		t.Fatal(err)
	}
	if talker.Spec.App != "talker" || talker.Spec.Program != "/bin/sh" || talker.Spec.Landlock.FS || !talker.Spec.Landlock.WriteOnly {
		t.Errorf("talker (policy broad): spec %+v", talker.Spec)
	}
	if !strings.HasPrefix(talker.Text, "app talker\n") || !strings.Contains(talker.Text, "files    read anywhere; write, create and remove only beneath these (policy broad):") {
		t.Errorf("talker's description:\n%s", talker.Text)
	}
	if talker.Spec.ParentPID != os.Getpid() {
		t.Errorf("parent pid %d, want the daemon's %d", talker.Spec.ParentPID, os.Getpid())
	}

	// idle is broad in the manifest, narrowed by the daemon's environment.
	idle, err := jailOf("idle")
	if err != nil {
		t.Fatal(err)
	}
	if !idle.Spec.Landlock.FS || !idle.Spec.Landlock.Net || len(idle.Spec.Landlock.ConnectTCP) != 0 || idle.Spec.Landlock.LogApp {
		t.Errorf("idle narrowed: landlock %+v", idle.Spec.Landlock)
	}
	for _, kv := range idle.Spec.Env {
		if strings.HasPrefix(kv, "OCTOSUP_SANDBOX_NARROW=") {
			t.Errorf("the app's environment keeps %s", kv)
		}
	}

	for _, c := range []struct {
		name string
		args any
		code string
	}{
		{"unknown app", control.AppArgs{App: "nope"}, control.CodeUnknownApp},
		{"no app", control.AppArgs{}, control.CodeBadRequest},
		{"unknown field", map[string]string{"ap": "idle"}, control.CodeBadRequest},
	} {
		if err := d.client.Do(ctx, control.OpJail, c.args, nil); codeOf(err) != c.code {
			t.Errorf("%s: %v, want %s", c.name, err, c.code)
		}
	}

	// The manifest's developer mode reaches the spec once reloaded.
	b, err := os.ReadFile("testdata/two-apps.json")
	if err != nil {
		t.Fatal(err)
	}
	env.writeManifest(t, bytes.Replace(b, []byte(`"version": 1,`), []byte(`"version": 1, "developer_mode": true,`), 1))
	if err := d.client.Do(ctx, control.OpReload, nil, nil); err != nil {
		t.Fatal(err)
	}
	idle, err = jailOf("idle")
	if err != nil {
		t.Fatal(err)
	}
	if !idle.Spec.Landlock.LogApp {
		t.Errorf("developer mode: landlock %+v, want log_app", idle.Spec.Landlock)
	}
}
