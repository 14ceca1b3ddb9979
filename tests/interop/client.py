"""The interop suite's MCP client: the official Python SDK (mcp==2.3.0)
talking to a real plangate, over stdio (the SDK starts `plangate serve
--stdio` itself) or Streamable HTTP (a running `plangate serve --http`).

    python client.py SCENARIO --transport stdio|http [options]

Each scenario drives plangate and prints ONE JSON object on stdout with what
it observed; crates/cli/tests/interop.rs runs it and makes the assertions,
so a failure names the observation that was wrong. Any exception ends the
process non-zero with its traceback on stderr. Every argument value that
carries meaning includes the test's canary (``--canary``), so the test can
grep plangate's logs for it afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

# Bounds for every wait, so a broken gateway fails the test instead of
# hanging it (the Rust side has its own, longer, timeout too).
WAIT = 30.0


def dump(model: Any) -> Any:
    """A pydantic model as wire JSON (camelCase)."""
    if model is None:
        return None
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def texts(result: types.CallToolResult) -> str:
    """All text content of a tool result, joined."""
    return "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")


@contextlib.asynccontextmanager
async def session(args: argparse.Namespace, token: str | None, **kw: Any) -> AsyncIterator[ClientSession]:
    """An initialized SDK session with plangate as `token`'s holder."""
    if args.transport == "stdio":
        env = dict(os.environ)
        env.pop("PLANGATE_CONFIG", None)
        env.pop("PLANGATE_KEY", None)
        if token is not None:
            env["PLANGATE_KEY"] = token
        # Debug by default, so the test's log scan covers debug lines too.
        env.setdefault("PLANGATE_LOG", "debug")
        params = StdioServerParameters(
            command=args.plangate,
            args=["--data-dir", args.data_dir, "serve", "--stdio", "--config", args.config],
            env=env,
        )
        # plangate's stderr (its logs) is appended to a file the test scans.
        with open(args.plangate_log, "a", encoding="utf-8") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write, **kw) as s:
                    await s.initialize()
                    yield s
    else:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(WAIT, read=120.0)) as http:
            async with streamable_http_client(args.url, http_client=http) as (read, write):
                async with ClientSession(read, write, **kw) as s:
                    await s.initialize()
                    yield s


async def all_tools(s: ClientSession) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor = None
    while True:
        page = await s.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


async def wait_for_tool(s: ClientSession, name: str) -> list[str]:
    """Lists tools until `name` is there (an upstream may add it just after
    it initialized, announcing it with list_changed)."""
    deadline = time.monotonic() + WAIT
    while True:
        names = [t.name for t in await all_tools(s)]
        if name in names or time.monotonic() > deadline:
            return names
        await anyio.sleep(0.2)


# --- scenarios -------------------------------------------------------------


async def basics(args: argparse.Namespace) -> dict[str, Any]:
    """Tools with annotations, reads (tool, resource, prompt), an upstream
    isError, structured content, an echo of the canary."""
    out: dict[str, Any] = {}
    async with session(args, args.token) as s:
        out["server_info"] = dump(s.server_info)
        out["protocol_version"] = s.protocol_version
        tools = await all_tools(s)
        out["tools"] = {
            t.name: {"annotations": dump(t.annotations), "output_schema": t.output_schema} for t in tools
        }
        out["read"] = dump(await s.call_tool("fs__read_text_file", {"path": os.path.join(args.root, "seed.txt")}))
        out["outside_root"] = dump(
            await s.call_tool("fs__read_text_file", {"path": f"/{args.canary}/outside.txt"})
        )
        out["structured"] = dump(await s.call_tool("everything__get-structured-content", {"location": "Chicago"}))
        out["echo"] = dump(await s.call_tool("everything__echo", {"message": args.canary}))
        resources = (await s.list_resources()).resources
        out["resources"] = [r.uri for r in resources]
        static = next(r.uri for r in resources if "static/document" in r.uri)
        out["resource_read"] = {"uri": static, "result": dump(await s.read_resource(static))}
        prompts = (await s.list_prompts()).prompts
        out["prompts"] = [p.name for p in prompts]
        simple = next(p.name for p in prompts if p.name.endswith("simple-prompt"))
        out["prompt"] = dump(await s.get_prompt(simple))
        try:
            missing = await s.read_resource(f"demo://everything__resource/static/document/{args.canary}.md")
            out["missing_resource"] = {"unexpected": dump(missing)}
        except MCPError as e:
            out["missing_resource"] = {"code": e.error.code, "message": e.error.message}
    if args.direct:
        # The same servers without plangate, to compare listings with.
        out["direct_tools"] = {}
        for name, spec in json.loads(args.direct).items():
            params = StdioServerParameters(
                command=spec["command"], args=spec["args"], env={**os.environ, **spec["env"]}
            )
            with open(os.devnull, "w", encoding="utf-8") as devnull:
                async with stdio_client(params, errlog=devnull) as (read, write):
                    async with ClientSession(read, write) as s:
                        await s.initialize()
                        out["direct_tools"][name] = {t.name: dump(t.annotations) for t in await all_tools(s)}
    return out


async def progress(args: argparse.Namespace) -> dict[str, Any]:
    """Concurrent long-running calls, each with its own progress callback:
    two on one session and, over HTTP, one more on a second session."""
    plan = [("a", 0, 3), ("b", 0, 4), ("c", 1, 5)]
    if args.transport == "stdio":
        plan = [(n, 0, steps) for n, _, steps in plan]
    seen: dict[str, list[list[float | None]]] = {n: [] for n, _, _ in plan}
    results: dict[str, Any] = {}

    async with contextlib.AsyncExitStack() as stack:
        sessions = [await stack.enter_async_context(session(args, args.token))]
        if any(i == 1 for _, i, _ in plan):
            sessions.append(await stack.enter_async_context(session(args, args.token)))

        async def one(name: str, index: int, steps: int) -> None:
            async def on_progress(p: float, total: float | None, message: str | None) -> None:
                seen[name].append([p, total])

            r = await sessions[index].call_tool(
                "everything__trigger-long-running-operation",
                {"duration": steps * 0.4, "steps": steps},
                progress_callback=on_progress,
            )
            results[name] = texts(r)

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                for name, index, steps in plan:
                    tg.start_soon(one, name, index, steps)
    return {
        "calls": {n: {"steps": steps, "session": i, "progress": seen[n], "result": results.get(n)} for n, i, steps in plan}
    }


async def progress_burst(args: argparse.Namespace) -> dict[str, Any]:
    """Many short long-running calls, in concurrent lanes: each sends its
    only progress notification right before its result."""
    calls: list[dict[str, Any]] = []
    async with session(args, args.token) as s:

        async def lane() -> None:
            for _ in range(args.burst_calls):
                seen: list[list[float | None]] = []

                async def on_progress(p: float, total: float | None, message: str | None, seen: Any = seen) -> None:
                    seen.append([p, total])

                await s.call_tool(
                    "everything__trigger-long-running-operation",
                    {"duration": 0.02, "steps": 1},
                    progress_callback=on_progress,
                )
                calls.append({"steps": 1, "progress": seen})

        with anyio.fail_after(WAIT * 2):
            async with anyio.create_task_group() as tg:
                for _ in range(args.burst_lanes):
                    tg.start_soon(lane)
        # Anything still in flight would arrive now, after its result.
        await anyio.sleep(0.2)
    return {"calls": calls}


async def cancel(args: argparse.Namespace) -> dict[str, Any]:
    """Starts a long call, cancels it after its first progress, waits past
    the time it would have finished, then shows the session still works."""
    duration, steps = 3.0, 6
    progress_at: list[float] = []
    first = anyio.Event()
    out: dict[str, Any] = {"duration": duration}
    async with session(args, args.token) as s:
        scope = anyio.CancelScope()

        async def on_progress(p: float, total: float | None, message: str | None) -> None:
            progress_at.append(time.monotonic())
            first.set()

        async def long_call() -> None:
            with scope:
                r = await s.call_tool(
                    "everything__trigger-long-running-operation",
                    {"duration": duration, "steps": steps},
                    progress_callback=on_progress,
                )
                out["completed"] = texts(r)

        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            tg.start_soon(long_call)
            with anyio.fail_after(WAIT):
                await first.wait()
            cancelled_at = time.monotonic()
            scope.cancel()
        out["cancelled_after_s"] = cancelled_at - started
        # Wait past the moment the operation would have finished.
        await anyio.sleep(max(0.0, started + duration + 1.0 - time.monotonic()))
        out["progress_after_cancel"] = sum(1 for t in progress_at if t > cancelled_at)
        out["progress_before_cancel"] = sum(1 for t in progress_at if t <= cancelled_at)
        out["echo_after"] = dump(await s.call_tool("everything__echo", {"message": args.canary}))
    return out


async def elicitation(args: argparse.Namespace) -> dict[str, Any]:
    """An upstream's elicitation/create during a call reaches this client."""
    asked: list[Any] = []

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(dump(params))
        return types.ElicitResult(action="accept", content={"name": args.canary, "check": True})

    out: dict[str, Any] = {}
    async with session(args, args.token, elicitation_callback=on_elicit) as s:
        names = await wait_for_tool(s, "everything__trigger-elicitation-request")
        out["listed"] = "everything__trigger-elicitation-request" in names
        with anyio.fail_after(WAIT):
            r = await s.call_tool("everything__trigger-elicitation-request", {})
        out["result"] = dump(r)
        out["text"] = texts(r)
    out["asked"] = asked
    return out


def children(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the live children of `pid`, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                stat = f.read()
            # Fields after the parenthesised command: state, ppid, …
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] == "Z" or int(fields[1]) != pid:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            found.append((int(entry), cmd))
        except (OSError, ValueError, IndexError):
            continue
    return found


def plangate_pid(args: argparse.Namespace) -> int:
    if args.plangate_pid:
        return args.plangate_pid
    # Over stdio the SDK started plangate: it is a child of this process.
    mine = [pid for pid, cmd in children(os.getpid()) if "plangate" in cmd]
    if len(mine) != 1:
        raise RuntimeError(f"expected one plangate child, found {children(os.getpid())}")
    return mine[0]


def upstream_pid(gateway: int, needle: str) -> int | None:
    pids = [pid for pid, cmd in children(gateway) if needle in cmd]
    return pids[0] if len(pids) == 1 else None


async def restart(args: argparse.Namespace) -> dict[str, Any]:
    """Kills an upstream's process mid-session (SIGKILL, found among
    plangate's children) and shows its tools come back and calls work."""
    target = args.kill  # "memory" or "everything"
    needle = {"memory": "server-memory", "everything": "server-everything"}[target]
    notifications: list[str] = []
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        method = getattr(message, "method", None) or getattr(getattr(message, "root", None), "method", None)
        if method:
            notifications.append(method)
            if method == "notifications/tools/list_changed":
                changed.set()

    out: dict[str, Any] = {"target": target}
    entity = {"name": args.canary, "entityType": "interop", "observations": [f"first-{args.canary}"]}
    async with session(args, args.token, message_handler=on_message) as s:
        prefix = f"{target}__"
        if target == "everything":
            # Its capability-dependent tools come with a list_changed just
            # after it starts: wait for them so "before" is complete.
            before = await wait_for_tool(s, "everything__trigger-elicitation-request")
        else:
            before = [t.name for t in await all_tools(s)]
        out["tools_before"] = sorted(n for n in before if n.startswith(prefix))
        if target == "memory":
            out["before_call"] = dump(await s.call_tool("memory__create_entities", {"entities": [entity]}))
        else:
            out["before_call"] = dump(await s.call_tool("everything__echo", {"message": args.canary}))

        gateway = plangate_pid(args)
        old = upstream_pid(gateway, needle)
        if old is None:
            raise RuntimeError(f"no single {needle} child of plangate {gateway}: {children(gateway)}")
        out["old_pid"] = old
        changed = anyio.Event()
        os.kill(old, signal.SIGKILL)
        killed_at = time.monotonic()

        with anyio.fail_after(WAIT):
            await changed.wait()
        right_after = [t.name for t in await all_tools(s)]
        out["tools_right_after_kill"] = sorted(n for n in right_after if n.startswith(prefix))

        # Back: a new process, and its tools listed again.
        deadline = time.monotonic() + WAIT
        while True:
            new = upstream_pid(gateway, needle)
            names = [t.name for t in await all_tools(s)]
            back = sorted(n for n in names if n.startswith(prefix))
            if (new is not None and new != old and set(back) >= set(out["tools_before"])) or time.monotonic() > deadline:
                break
            await anyio.sleep(0.1)
        out["new_pid"] = new
        out["tools_after"] = back
        out["back_after_s"] = time.monotonic() - killed_at
        out["list_changed_count"] = notifications.count("notifications/tools/list_changed")

        if target == "memory":
            out["after_call"] = dump(
                await s.call_tool(
                    "memory__add_observations",
                    {"observations": [{"entityName": args.canary, "contents": [f"second-{args.canary}"]}]},
                )
            )
            out["after_read"] = dump(await s.call_tool("memory__search_nodes", {"query": args.canary}))
        else:
            out["after_call"] = dump(await s.call_tool("everything__echo", {"message": args.canary}))
            out["after_read"] = dump(
                await s.call_tool("everything__get-structured-content", {"location": "New York"})
            )
    return out


async def filesystem(args: argparse.Namespace) -> dict[str, Any]:
    """server-filesystem: a write with a write key lands on disk and reads
    back; the same write with a read key is refused and writes nothing."""
    path = os.path.join(args.root, f"{args.canary}.txt")
    content = f"written through plangate: {args.canary}\n"
    out: dict[str, Any] = {"path": path, "content": content}
    async with session(args, args.token) as s:
        out["write"] = dump(await s.call_tool("fs__write_file", {"path": path, "content": content}))
        out["read"] = dump(await s.call_tool("fs__read_text_file", {"path": path}))
        out["list"] = dump(await s.call_tool("fs__list_directory", {"path": args.root}))
        out["info"] = dump(await s.call_tool("fs__get_file_info", {"path": path}))
    denied = os.path.join(args.root, f"{args.canary}-denied.txt")
    out["denied_path"] = denied
    async with session(args, args.read_token) as s:
        out["read_key_write"] = dump(await s.call_tool("fs__write_file", {"path": denied, "content": args.canary}))
        out["read_key_read"] = dump(await s.call_tool("fs__read_text_file", {"path": path}))
    return out


async def no_bearer(args: argparse.Namespace) -> dict[str, Any]:
    """HTTP without a bearer token: refused before MCP, with 401."""
    out: dict[str, Any] = {}
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "interop", "version": "0"},
        },
    }
    async with httpx2.AsyncClient(timeout=WAIT) as http:
        r = await http.post(
            args.url,
            json=init,
            headers={"Accept": "application/json, text/event-stream"},
        )
        out["status"] = r.status_code
        out["www_authenticate"] = r.headers.get("www-authenticate")
        try:
            out["body"] = r.json()
        except ValueError:
            out["body"] = r.text
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "everything__echo", "arguments": {"message": args.canary}},
        }
        r = await http.post(args.url, json=call, headers={"Accept": "application/json, text/event-stream"})
        out["call_status"] = r.status_code
    try:
        with anyio.fail_after(WAIT):
            async with session(args, None) as s:
                await s.call_tool("everything__echo", {"message": args.canary})
        out["sdk"] = "connected"
    except Exception as e:  # noqa: BLE001 - the refusal is what we observe
        out["sdk"] = f"{type(e).__name__}: {e}"
        out["sdk_errors"] = leaf_errors(e)
    return out


def leaf_errors(e: BaseException) -> list[str]:
    """The errors inside exception groups and their causes, as text."""
    found: list[str] = []
    seen: set[int] = set()

    def walk(x: BaseException | None) -> None:
        if x is None or id(x) in seen:
            return
        seen.add(id(x))
        if isinstance(x, BaseExceptionGroup):
            for inner in x.exceptions:
                walk(inner)
        else:
            found.append(f"{type(x).__name__}: {x}")
        walk(x.__cause__)
        walk(x.__context__)

    walk(e)
    return found


# --- plan mode, secrets, review ----------------------------------------------


def structured(result: types.CallToolResult) -> dict[str, Any]:
    return result.structured_content or {}


async def plan_apply(args: argparse.Namespace) -> dict[str, Any]:
    """Plan mode in front of server-filesystem: a write becomes a plan step
    and touches nothing; get_plan shows it; apply_plan with its digest runs
    it."""
    path = os.path.join(args.root, f"planned-{args.canary}.txt")
    content = f"planned through plangate: {args.canary}\n"
    out: dict[str, Any] = {"path": path, "content": content}
    async with session(args, args.token) as s:
        out["begin"] = dump(await s.call_tool("plangate_begin_session", {"mode": "plan"}))
        planned = await s.call_tool("fs__write_file", {"path": path, "content": content})
        out["planned"] = dump(planned)
        out["exists_after_plan"] = os.path.exists(path)
        out["get_plan"] = dump(await s.call_tool("plangate_get_plan", {}))
        out["exists_after_get_plan"] = os.path.exists(path)
        digest = structured(planned).get("plan", {}).get("plan_digest")
        out["apply"] = dump(await s.call_tool("plangate_apply_plan", {"plan_digest": digest}))
        out["exists_after_apply"] = os.path.exists(path)
        out["content_after_apply"] = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        # The SDK checks each answer above against the tool's declared
        # output schema (it raises on a mismatch); revert's too.
        out["revert"] = dump(await s.call_tool("plangate_revert", {}))
        listed = await s.list_tools()
        out["output_schemas"] = sorted(t.name for t in listed.tools if t.output_schema and t.name.startswith("plangate_"))
    return out


async def secret(args: argparse.Namespace) -> dict[str, Any]:
    """A secret argument of a planned call: redacted in every answer, still
    replayed on apply."""
    tool = "everything__toggle-simulated-logging"
    out: dict[str, Any] = {}
    async with session(args, args.token) as s:
        out["listed"] = tool in await wait_for_tool(s, tool)
        out["begin"] = dump(await s.call_tool("plangate_begin_session", {"mode": "plan"}))
        planned = await s.call_tool(tool, {"api_key": args.secret})
        out["planned"] = dump(planned)
        out["get_plan"] = dump(await s.call_tool("plangate_get_plan", {}))
        digest = structured(planned).get("plan", {}).get("plan_digest")
        out["apply"] = dump(await s.call_tool("plangate_apply_plan", {"plan_digest": digest}))
        out["get_plan_after"] = dump(await s.call_tool("plangate_get_plan", {}))
        out["end"] = dump(await s.call_tool("plangate_end_session", {}))
    return out


def answer_callback(args: argparse.Namespace, asked: list[Any]) -> Any:
    """An elicitation callback answering as --answer says."""

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(dump(params))
        if args.answer == "approve":
            return types.ElicitResult(action="accept", content={"decision": "approve"})
        if args.answer == "keep_planning":
            return types.ElicitResult(
                action="accept", content={"decision": "keep_planning", "feedback": args.feedback}
            )
        return types.ElicitResult(action=args.answer)

    return on_elicit


async def review(args: argparse.Namespace) -> dict[str, Any]:
    """Plans one write, then exit_plan_mode: the person is asked through
    the SDK's elicitation callback (or, with --answer none, the client
    declares no elicitation)."""
    path = os.path.join(args.root, f"reviewed-{args.answer}-{args.canary}.txt")
    content = f"reviewed through plangate: {args.canary}\n"
    asked: list[Any] = []
    kw: dict[str, Any] = {}
    if args.answer != "none":
        kw["elicitation_callback"] = answer_callback(args, asked)
    out: dict[str, Any] = {"path": path, "content": content}
    async with session(args, args.token, **kw) as s:
        out["begin"] = dump(await s.call_tool("plangate_begin_session", {"mode": "plan"}))
        out["planned"] = dump(await s.call_tool("fs__write_file", {"path": path, "content": content}))
        out["exists_after_plan"] = os.path.exists(path)
        with anyio.fail_after(WAIT):
            out["exit"] = dump(
                await s.call_tool("plangate_exit_plan_mode", {"plan": f"Write the file {path} ({args.canary})."})
            )
        out["exists_after_exit"] = os.path.exists(path)
        out["content_after_exit"] = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        out["get_plan_after"] = dump(await s.call_tool("plangate_get_plan", {}))
    out["asked"] = asked
    return out


async def ask(args: argparse.Namespace) -> dict[str, Any]:
    """An `ask` mode (config's [modes.careful]): a write above its access
    asks the person first, through the SDK's elicitation callback."""
    path = os.path.join(args.root, f"asked-{args.answer}-{args.canary}.txt")
    content = f"asked through plangate: {args.canary}\n"
    asked: list[Any] = []
    out: dict[str, Any] = {"path": path, "content": content}
    async with session(args, args.token, elicitation_callback=answer_callback(args, asked)) as s:
        out["begin"] = dump(await s.call_tool("plangate_begin_session", {"mode": "careful"}))
        with anyio.fail_after(WAIT):
            out["write"] = dump(await s.call_tool("fs__write_file", {"path": path, "content": content}))
        out["exists_after_write"] = os.path.exists(path)
        out["content_after_write"] = open(path, encoding="utf-8").read() if os.path.exists(path) else None
    out["asked"] = asked
    return out


async def shaping(args: argparse.Namespace) -> dict[str, Any]:
    """The agent of a plan a person shapes: plans five file writes, says
    their step ids on one line, waits for a line on stdin (the person has
    approved, rejected and amended in the console), then reads its plan and
    applies it."""
    out: dict[str, Any] = {}
    async with session(args, args.token) as s:
        await s.call_tool("plangate_begin_session", {"mode": "plan"})
        names = await wait_for_tool(s, "write_file")
        tool = next(n for n in names if n.endswith("write_file"))
        steps = []
        for i in range(1, 6):
            content = f"step {i} {args.canary}\n"
            if i == 4:
                # A long one: its diff is folded in the console.
                content += "".join(f"line {j}\n" for j in range(70))
            r = await s.call_tool(tool, {"path": os.path.join(args.root, f"step-{i}.txt"), "content": content})
            if r.is_error:
                raise RuntimeError(f"planning step {i} failed: {texts(r)}")
            steps.append(r.structured_content["step_id"])
        sys.stdout.write(json.dumps({"steps": steps}) + "\n")
        sys.stdout.flush()
        with anyio.fail_after(300):
            line = await anyio.to_thread.run_sync(sys.stdin.readline)
        out["go"] = line.strip()
        out["plan"] = dump(await s.call_tool("plangate_get_plan", {}))
        out["receipt"] = dump(await s.call_tool("plangate_apply_plan", {}))
    return out


SCENARIOS = {
    "basics": basics,
    "progress": progress,
    "progress_burst": progress_burst,
    "cancel": cancel,
    "elicitation": elicitation,
    "restart": restart,
    "filesystem": filesystem,
    "no_bearer": no_bearer,
    "plan_apply": plan_apply,
    "secret": secret,
    "review": review,
    "ask": ask,
    "shaping": shaping,
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("scenario", choices=sorted(SCENARIOS))
    p.add_argument("--transport", choices=["stdio", "http"], required=True)
    p.add_argument("--token", help="a write key")
    p.add_argument("--read-token", help="a read key")
    p.add_argument("--canary", required=True)
    p.add_argument("--url", help="plangate's /mcp URL (http)")
    p.add_argument("--plangate", help="the plangate binary (stdio)")
    p.add_argument("--data-dir", help="plangate's data dir (stdio)")
    p.add_argument("--config", help="plangate.toml (stdio)")
    p.add_argument("--plangate-log", help="file receiving plangate's stderr (stdio)")
    p.add_argument("--plangate-pid", type=int, help="plangate's pid (http, for restart)")
    p.add_argument("--root", help="server-filesystem's root")
    p.add_argument("--kill", choices=["memory", "everything"], default="memory")
    p.add_argument("--burst-lanes", type=int, default=4)
    p.add_argument("--burst-calls", type=int, default=8)
    p.add_argument("--secret", help="a secret argument value (secret)")
    p.add_argument(
        "--answer",
        choices=["approve", "keep_planning", "decline", "cancel", "none"],
        default="approve",
        help="the elicitation callback's answer (review, ask); none: declare no elicitation",
    )
    p.add_argument("--feedback", default="", help="feedback sent with keep_planning")
    p.add_argument("--direct", help="JSON {name: {command, args, env}} of upstreams to list directly")
    args = p.parse_args()
    result = anyio.run(SCENARIOS[args.scenario], args)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
