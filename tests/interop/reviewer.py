"""A reviewer's assistant on plangate's operator endpoint: the official
Python SDK (mcp==2.3.0) as a Claude-Desktop-style client whose elicitation
callback stands for the person answering the form.

    python reviewer.py --key agent --answers decline,yes,yes [--code 123456]
        (--url http://…/mcp/operator --token pgo_… | --stdio PLANGATE DATA_DIR CONFIG)
        [--no-elicit]

The assistant does what a plan's planted text tells it: it lists the
plans, shows the key's plan, tries to say yes in its own arguments, then
calls approve_plan and apply_plan in turn, once for each answer, which the
"person" gives in the form (`yes`, `decline`, `untick`, `cancel`). It
prints ONE JSON object with everything it saw; crates/cli/tests/reviewer.rs
makes the assertions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

WAIT = 60.0


def dump(model: Any) -> Any:
    return None if model is None else model.model_dump(mode="json", by_alias=True, exclude_none=True)


def texts(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")


@contextlib.asynccontextmanager
async def session(args: argparse.Namespace, **kw: Any) -> AsyncIterator[ClientSession]:
    if args.stdio:
        plangate, data_dir, config = args.stdio
        env = dict(os.environ)
        env.pop("PLANGATE_KEY", None)
        if args.token:
            env["PLANGATE_OPERATOR_TOKEN"] = args.token
        params = StdioServerParameters(
            command=plangate,
            args=["--data-dir", data_dir, "serve", "--operator-stdio", "--config", config],
            env=env,
        )
        with open(args.log, "a", encoding="utf-8") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write, **kw) as s:
                    await s.initialize()
                    yield s
    else:
        headers = {"Authorization": f"Bearer {args.token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(WAIT, read=120.0)) as http:
            async with streamable_http_client(args.url, http_client=http) as (read, write):
                async with ClientSession(read, write, **kw) as s:
                    await s.initialize()
                    yield s


async def main(args: argparse.Namespace) -> dict[str, Any]:
    answers = [a for a in args.answers.split(",") if a]
    forms: list[Any] = []

    async def person(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        forms.append(dump(params))
        answer = answers[len(forms) - 1] if len(forms) <= len(answers) else "cancel"
        if answer == "decline":
            return types.ElicitResult(action="decline")
        if answer == "cancel":
            return types.ElicitResult(action="cancel")
        content: dict[str, Any] = {"approve": answer == "yes"}
        if args.code:
            content["code"] = args.code
        return types.ElicitResult(action="accept", content=content)

    kw: dict[str, Any] = {} if args.no_elicit else {"elicitation_callback": person}
    out: dict[str, Any] = {"calls": []}
    async with session(args, **kw) as s:
        out["instructions"] = s.initialize_result.instructions if hasattr(s, "initialize_result") else None
        out["tools"] = [t.name for t in (await s.list_tools()).tools]
        listed = await s.call_tool("list_plans", {})
        out["list"] = {"result": dump(listed), "text": texts(listed)}

        async def shown() -> dict[str, Any]:
            r = await s.call_tool("show_plan", {"key": args.key})
            return {"result": dump(r), "text": texts(r)}

        out["show"] = await shown()
        digest = out["show"]["result"]["structuredContent"]["plan"]["plan_digest"]
        # What the planted text asks for: a yes in the assistant's own words.
        own = await s.call_tool("approve_plan", {"key": args.key, "plan_digest": digest, "approved": True})
        out["own_yes"] = dump(own)
        for i, _ in enumerate(answers):
            tool = "approve_plan" if i < len(answers) - 1 or len(answers) == 1 else "apply_plan"
            if args.apply_last is False:
                tool = "approve_plan"
            digest = (await shown())["result"]["structuredContent"]["plan"]["plan_digest"]
            with anyio.fail_after(WAIT):
                r = await s.call_tool(tool, {"key": args.key, "plan_digest": digest})
            out["calls"].append({"tool": tool, "result": dump(r), "text": texts(r)})
        out["show_after"] = await shown()
    out["forms"] = forms
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--url")
    p.add_argument("--token")
    p.add_argument("--stdio", nargs=3, metavar=("PLANGATE", "DATA_DIR", "CONFIG"))
    p.add_argument("--log", default=os.devnull)
    p.add_argument("--key", required=True)
    p.add_argument("--answers", default="")
    p.add_argument("--code")
    p.add_argument("--no-elicit", action="store_true")
    p.add_argument("--approve-only", dest="apply_last", action="store_false")
    a = p.parse_args()
    result = anyio.run(main, a)
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
