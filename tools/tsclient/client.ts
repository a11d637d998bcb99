// A client of every control op and hub frame, typed only by what
// json-schema-to-typescript generates from configs/schema (gen/, made by
// gen.mjs). It is never run: tsc checks it, so that a schema a generator
// cannot type (a map of schemas, a type named like the language's own, a
// member typed as an object that is any JSON) fails go test.
import type { ControlRequest } from "./gen/control-request";
import type {
  ControlAnswer,
  ControlError,
  HelloData,
  StatusData,
  StartData,
  StopData,
  RestartData,
  LogsData,
  SubscribeData,
  ReloadData,
  JailData,
  ApprovalsData,
  ApproveData,
  ConsentData,
  RulesData,
  AuditData,
  KernelAttachData,
  ToolCallData,
  ToolCancelData,
  ContextOwnerData,
  ContextListData,
  LinkHasData,
  AccountCloseData,
  DebugData,
} from "./gen/control-answer";
import type { ControlEvent } from "./gen/control-event";
import type { HubUp } from "./gen/hub-up";
import type { HubDown } from "./gen/hub-down";

type Op = ControlRequest["op"];
type RequestOf<K extends Op> = Extract<ControlRequest, { op: K }>;

// One request of each op: a missing op, or args of the wrong shape, does
// not type-check.
export const requests: { [K in Op]: RequestOf<K> } = {
  hello: { id: 1, op: "hello" },
  status: { id: 2, op: "status", args: { app: "notes" } },
  start: { id: 3, op: "start", args: { app: "notes" } },
  stop: { id: 4, op: "stop", args: { app: "notes" } },
  restart: { id: 5, op: "restart", args: { app: "notes" } },
  logs: { id: 6, op: "logs", args: { app: "notes", lines: 10, follow: true } },
  subscribe: { id: 7, op: "subscribe", args: { topics: ["state", "approval"] } },
  reload: { id: 8, op: "reload", args: { keep_running: true } },
  jail: { id: 9, op: "jail", args: { app: "notes" } },
  approvals: { id: 10, op: "approvals" },
  approve: { id: 11, op: "approve", args: { approval_id: "a-1", decision: "allow", remember: true } },
  consent: { id: 12, op: "consent", args: { action: "revoke", app: "notes" } },
  rules: { id: 13, op: "rules", args: { action: "list", app: "notes" } },
  audit: { id: 14, op: "audit", args: { app: "notes", limit: 20 } },
  "app.send": { id: 15, op: "app.send", args: { app: "notes", frame: { kind: "ping" } } },
  "kernel.attach": { id: 16, op: "kernel.attach" },
  "request.reply": { id: 17, op: "request.reply", args: { app: "notes", req_id: "r1", ok: true, data: { turn_id: "T1" } } },
  "request.event": {
    id: 18,
    op: "request.event",
    args: { app: "notes", req_id: "r1", event: { type: "turn.end", turn_id: "T1", reason: "completed" } },
  },
  "tool.call": {
    id: 19,
    op: "tool.call",
    args: {
      app: "notes",
      call: { call_id: "c1", name: "notes.search", args: { query: "milk" }, confirm: "none", timeout_ms: 5000, context_id: "x-1", caller: "assistant" },
    },
  },
  "tool.cancel": { id: 20, op: "tool.cancel", args: { app: "notes", call_id: "c1" } },
  "context.owner": { id: 21, op: "context.owner", args: { app: "notes", context_id: "x-1" } },
  "context.list": { id: 22, op: "context.list", args: { app: "notes" } },
  "link.has": { id: 23, op: "link.has", args: { app: "notes" } },
  "account.close": { id: 24, op: "account.close", args: { app: "notes", account: "personal" } },
  debug: { id: 25, op: "debug" },
};

// Each op's answer data. An op is here or among those answered without
// data: one the schemas add without a data type does not type-check.
export interface DataOf {
  hello: HelloData;
  status: StatusData;
  start: StartData;
  stop: StopData;
  restart: RestartData;
  logs: LogsData;
  subscribe: SubscribeData;
  reload: ReloadData;
  jail: JailData;
  approvals: ApprovalsData;
  approve: ApproveData;
  consent: ConsentData;
  rules: RulesData;
  audit: AuditData;
  "kernel.attach": KernelAttachData;
  "tool.call": ToolCallData;
  "tool.cancel": ToolCancelData;
  "context.owner": ContextOwnerData;
  "context.list": ContextListData;
  "link.has": LinkHasData;
  "account.close": AccountCloseData;
  debug: DebugData;
}
type NoData = "app.send" | "request.reply" | "request.event";
type Unmapped = Exclude<Op, keyof DataOf | NoData>;
type NotOps = Exclude<keyof DataOf | NoData, Op>;
export const everyOpHasItsData: [Unmapped, NotOps] extends [never, never] ? true : false = true;

// The data of an ok answer to op, or the error of a failed one.
export function dataOf<K extends keyof DataOf>(_op: K, a: ControlAnswer): DataOf[K] | ControlError {
  if (!a.ok) {
    if (a.error === undefined) throw new Error("a failed answer without an error");
    return a.error;
  }
  return a.data as DataOf[K];
}

// What a shell shows of status, down to the desktop grants.
export function describe(s: StatusData): string[] {
  return s.apps.map((a) => {
    const grants = (a.jail?.grants ?? []).map((g) => `${g.name} via ${g.via}${g.path === undefined ? "" : " " + g.path}`);
    const missing = a.limits?.missing.join(", ") ?? "";
    return `${a.id} ${a.state}${a.pid === undefined ? "" : " " + a.pid} [${grants.join("; ")}] ${missing}`;
  });
}

// Every event, exhaustively: a new event kind does not type-check.
export function onEvent(e: ControlEvent): string {
  switch (e.event) {
    case "state":
      return `${e.app} ${e.state}`;
    case "approval":
      return `approval ${e.approval_id}`;
    case "app.frame":
      return `${e.app} frame`;
    case "log":
      return `${e.app}: ${e.text}`;
    case "request":
      return `${e.app} asks ${e.method}`;
    case "context.closed":
      return `${e.app} closed ${e.context_id}`;
    case "tool.acknowledged":
      return `${e.app} acknowledged ${e.call_id}`;
    case "tool.finished":
      return `${e.app} ${e.call_id}: ${e.outcome}`;
    default: {
      const unknown: never = e;
      return String(unknown);
    }
  }
}

// The hub both ways: an app's frames, and the daemon's.
export function appSays(f: HubUp): string {
  if ("octos_peer" in f && f.octos_peer !== undefined && typeof f.octos_peer === "object" && "type" in f.octos_peer) {
    const p = f.octos_peer;
    return p.type === "request" ? `request ${p.method}` : `tool_result ${p.call_id}`;
  }
  return "pass-through";
}

export function daemonSays(f: HubDown): string {
  if ("octos_peer" in f && f.octos_peer !== undefined && typeof f.octos_peer === "object" && "type" in f.octos_peer) {
    return f.octos_peer.type;
  }
  return "pass-through";
}
