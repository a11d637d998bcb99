#!/usr/bin/env python3
"""The README's walkthrough, as a desktop shell and an agent kernel do it
over octosupd's control socket (docs/control.md): status, a subscription,
first-use consent answered, a turn answered as the kernel, tool calls (one
the person confirms, remembered as a rule), an app killed and restarted.

    walkthrough.py [--socket PATH] [--notes APP] [--chat APP]

notes is the demo notes app (tools notes.search and notes.append); chat,
when given, is an app that starts a turn once its session is open. Each
step prints a line; the exit status is 0 when every step went as the docs
say, 1 otherwise.
"""

import argparse
import os
import signal
import sys

from octosup_control import Connection, ControlError, socket_path


def step(what):
    print(f"== {what}", flush=True)


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", default=socket_path())
    ap.add_argument("--notes", default="notes")
    ap.add_argument("--chat", default="")
    opts = ap.parse_args()
    notes, chat = opts.notes, opts.chat
    hub_apps = [a for a in (notes, chat) if a]

    shell = Connection(opts.socket)
    kernel = Connection(opts.socket)

    step("hello")
    hello = shell.call("hello")
    expect(hello["protocol"] == "octosup-control" and hello["version"] == 1, f"hello {hello}")
    for op in ("status", "subscribe", "approve", "kernel.attach", "tool.call", "restart"):
        expect(op in hello["ops"], f"the daemon does not serve {op}")
    print(f"protocol {hello['protocol']} {hello['version']}, {len(hello['ops'])} ops")

    # Subscribed before listing: no question is missed between the two.
    step("subscribe")
    topics = shell.call("subscribe", {"topics": ["state", "approval"]})["topics"]
    expect(topics == ["approval", "state"], f"topics {topics}")

    step("status")
    apps = {a["id"]: a for a in shell.call("status")["apps"]}
    for a in apps.values():
        print(f"{a['id']}: {a['state']} pid {a.get('pid', '-')} restarts {a['restarts']}")
    for a in hub_apps:
        expect(apps.get(a, {}).get("state") == "running", f"{a} is not running: {apps.get(a)}")

    step("approvals: first-use consent")
    pending = {p["app"]: p for p in shell.call("approvals")["approvals"] if p["kind"] == "consent"}
    while not all(a in pending for a in hub_apps):
        ev = shell.wait_event("approval", lambda e: e["kind"] == "consent" and e["state"] == "pending")
        pending[ev["app"]] = ev
    for a in hub_apps:
        print(f"{pending[a]['approval_id']}: {a} asks to use the agent service ({pending[a].get('method')})")

    # The kernel attaches before consent is given: the chat app's turn,
    # which follows its session, then reaches it.
    step("kernel.attach")
    expect(kernel.call("kernel.attach") == {"attached": True}, "kernel.attach")

    step("approve")
    try:
        shell.call("approve", {"approval_id": pending[notes]["approval_id"], "decision": "allow", "remember": True})
        raise AssertionError("approve of a consent with remember was accepted")
    except ControlError as e:
        expect(e.code == "bad_request", f"approve with remember: {e}")
        print(f"remember is refused for consent: {e.message}")
    for a in hub_apps:
        d = shell.call("approve", {"approval_id": pending[a]["approval_id"], "decision": "allow"})
        expect(d == {"decision": "allow"}, f"approve: {d}")
        settled = shell.wait_event("approval", lambda e, a=a: e["approval_id"] == pending[a]["approval_id"])
        expect(settled["state"] == "allowed", f"settled {settled}")
        print(f"{a}: allowed")
    consents = {c["app"]: c["decision"] for c in shell.call("consent", {"action": "list"})["consents"]}
    expect(all(consents.get(a) == "allow" for a in hub_apps), f"consent list {consents}")

    if chat:
        step("answer a turn as the kernel")
        req = kernel.wait_event("request", lambda e: e["app"] == chat)
        expect(req["method"] == "octos.turn.start", f"request {req}")
        print(f"{chat} asks {req['args'].get('input')!r} in context {req['context_id']} ({req['account'] or 'no account'})")
        # Pipelined: kernel ops take effect in the order sent.
        answers = [
            kernel.send("request.reply", {"app": chat, "req_id": req["req_id"], "ok": True, "data": {"turn_id": "T1"}}),
            kernel.send("request.event", {"app": chat, "req_id": req["req_id"], "event": {"type": "text", "text": "hello from python"}}),
            kernel.send("request.event", {"app": chat, "req_id": req["req_id"],
                                          "event": {"type": "turn.end", "turn_id": "T1", "reason": "completed"}}),
        ]
        for a in answers:
            a()
        try:
            kernel.call("request.event", {"app": chat, "req_id": req["req_id"], "event": {"type": "text"}})
            raise AssertionError("an event after turn.end was accepted")
        except ControlError as e:
            expect(e.code == "unknown_request", f"event after the end: {e}")
        print("turn T1 streamed and ended")

    step("tool calls into notes")
    ctx = kernel.call("context.list", {"app": notes})["contexts"]
    expect(ctx, f"{notes} has no open context")
    context_id = ctx[0]["context_id"]
    pid = os.getpid()

    def call(call_id, tool, args, risk, confirm):
        return kernel.call("tool.call", {"app": notes, "call": {
            "call_id": call_id, "name": tool, "args": args, "risk": risk, "confirm": confirm,
            "timeout_ms": 30000, "context_id": context_id, "caller": "walkthrough.py"}})

    def outcome(call_id):
        kernel.wait_event("tool.acknowledged", lambda e: e["call_id"] == call_id)
        return kernel.wait_event("tool.finished", lambda e: e["call_id"] == call_id)

    try:
        kernel.call("tool.call", {"app": notes, "call": {"call_id": f"py{pid}-x", "name": "notes.search", "args": {},
                                                        "timeout_ms": 1000, "context_id": context_id, "caller": "py"}})
        raise AssertionError("a tool.call without confirm was accepted")
    except ControlError as e:
        expect(e.code == "bad_request" and "confirm" in e.message, f"tool.call without confirm: {e}")

    acc = call(f"py{pid}-1", "notes.search", {"query": "milk"}, "read", "none")
    expect(acc["accepted"], f"tool.call {acc}")
    fin = outcome(f"py{pid}-1")
    expect(fin["outcome"] == "ok", f"notes.search {fin}")
    print(f"notes.search: ok {fin.get('data')}")

    call(f"py{pid}-2", "notes.append", {"text": "buy milk"}, "write", "app")
    fin = outcome(f"py{pid}-2")
    expect(fin["outcome"] == "ok", f"notes.append --confirm app {fin}")
    print(f"notes.append (the app confirms): ok {fin.get('data')}")

    step("a confirm: host call, the person asked")
    call(f"py{pid}-3", "notes.append", {"text": "eggs"}, "write", "host")
    sheet = shell.wait_event("approval", lambda e: e["kind"] == "tool" and e["state"] == "pending")
    expect(sheet["call_id"] == f"py{pid}-3" and isinstance(sheet["args"], str), f"sheet {sheet}")
    print(f"{sheet['approval_id']}: run {sheet['tool']} ({sheet['risk']}) {sheet['args']}")
    shell.call("approve", {"approval_id": sheet["approval_id"], "decision": "allow", "remember": True})
    fin = outcome(f"py{pid}-3")
    expect(fin["outcome"] == "ok", f"notes.append --confirm host {fin}")
    rules = shell.call("rules", {"action": "list", "app": notes})["rules"]
    expect(any(r["tool"] == "notes.append" and r["decision"] == "allow" for r in rules), f"rules {rules}")
    print(f"notes.append (the person allowed it, remembered): ok {fin.get('data')}")
    entries = shell.call("audit", {"app": notes})["entries"]
    mine = [e for e in entries if e["call_id"].startswith(f"py{pid}-")]
    expect([e["decision"] for e in mine] == ["none", "none", "sheet"], f"audit {mine}")

    step("kill notes, then restart it")
    notes_pid = shell.call("status", {"app": notes})["apps"][0]["pid"]
    os.kill(notes_pid, signal.SIGKILL)
    stopped = shell.wait_event("state", lambda e: e["app"] == notes and e["state"] in ("stopped", "failed"))
    expect(stopped["state"] == "stopped" and stopped["last_exit"].get("signal") == "SIGKILL", f"state {stopped}")
    print(f"{notes}: stopped, signal {stopped['last_exit']['signal']}")
    kernel.wait_event("context.closed", lambda e: e["app"] == notes and e["reason"] == "app_exited")
    restarted = shell.call("restart", {"app": notes})
    expect(restarted["state"] == "running", f"restart {restarted}")
    print(f"{notes}: running (pid {restarted['app']['pid']}), restarts {restarted['app']['restarts']}")
    # Its consent is remembered: no question this time.
    left = [p for p in shell.call("approvals")["approvals"] if p["app"] == notes]
    expect(not left, f"approvals after the restart {left}")

    step("errors")
    for op, args, code in (("stat", None, "unknown_op"), ("status", {"app": "nope"}, "unknown_app"),
                           ("subscribe", {"topic": ["state"]}, "bad_request")):
        try:
            shell.call(op, args)
            raise AssertionError(f"{op} {args} was accepted")
        except ControlError as e:
            expect(e.code == code, f"{op}: {e}")
            print(f"{op}: {e.code}: {e.message}")

    kernel.close()
    shell.close()
    print("walkthrough done")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (AssertionError, ControlError, OSError) as e:
        print(f"walkthrough.py: {e}", file=sys.stderr)
        sys.exit(1)
