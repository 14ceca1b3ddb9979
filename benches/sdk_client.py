"""plangate-bench's "real agent" client: the official MCP Python SDK
(mcp==2.3.0, in .tools/venv from scripts/install-peers) timing sequential
`tools/call`s, over stdio (the SDK starts the server) or Streamable HTTP.

    python sdk_client.py --transport stdio --tool echo --calls N --warmup W -- CMD ARGS...
    python sdk_client.py --transport http --url URL [--bearer TOKEN] --tool echo --calls N --warmup W

Prints one JSON object: {"latencies_us": [...], "wall_s": S}. The timer
wraps `ClientSession.call_tool` only; start-up and `initialize` are not
timed. The SDK's own per-call work is included, which is the point: these
are the figures an agent built on the SDK sees.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client


async def timed(session: ClientSession, args: argparse.Namespace) -> dict:
    arguments = {"message": "hello"}
    for _ in range(args.warmup):
        await session.call_tool(args.tool, arguments)
    latencies = []
    start = time.perf_counter()
    for _ in range(args.calls):
        t = time.perf_counter()
        result = await session.call_tool(args.tool, arguments)
        latencies.append((time.perf_counter() - t) * 1e6)
        if result.is_error:
            raise RuntimeError(f"{args.tool} answered an error: {result}")
    return {"latencies_us": latencies, "wall_s": time.perf_counter() - start}


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--transport", choices=["stdio", "http"], required=True)
    p.add_argument("--url")
    p.add_argument("--bearer")
    p.add_argument("--tool", default="echo")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("command", nargs="*")
    args = p.parse_args()
    if args.transport == "stdio":
        params = StdioServerParameters(command=args.command[0], args=args.command[1:], env=dict(os.environ))
        with open(os.devnull, "w", encoding="utf-8") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    out = await timed(s, args)
    else:
        headers = {"Authorization": f"Bearer {args.bearer}"} if args.bearer else {}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0)) as http:
            async with streamable_http_client(args.url, http_client=http) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    out = await timed(s, args)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    anyio.run(main)
