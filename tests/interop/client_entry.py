"""Starts an MCP server the way a client would from its config file — the
entry's command, args and env, as Claude Desktop, Cursor, Claude Code and
VS Code do — with the official Python SDK, and reports what it sees.

    python client_entry.py CLIENT_FILE KEY_PATH_JSON TOOL ARGUMENTS_JSON

KEY_PATH_JSON is the server entry's place in the file, a JSON array of
keys (["mcpServers", "plangate"]). Prints ONE JSON object on stdout: the tool
names listed and the text of the one call's result. crates/cli/tests/wrap.rs
makes the assertions.
"""

from __future__ import annotations

import json
import os
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

WAIT = 30.0


def jsonc(text: str) -> str:
    """JSON with comments and trailing commas (VS Code's mcp.json) as plain
    JSON: comments dropped, a comma before a closing bracket dropped."""
    out: list[str] = []
    i, n, in_string = 0, len(text), False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        else:
            out.append(c)
        i += 1
    plain = "".join(out)
    result: list[str] = []
    in_string = False
    for j, c in enumerate(plain):
        if in_string:
            if c == '"' and plain[j - 1] != "\\":
                in_string = False
        elif c == '"':
            in_string = True
        elif c == "," and plain[j + 1 :].lstrip()[:1] in ("}", "]"):
            continue
        result.append(c)
    return "".join(result)


async def main() -> None:
    path, key_path, tool, arguments = sys.argv[1:5]
    with open(path, encoding="utf-8") as f:
        entry = json.loads(jsonc(f.read()))
    for key in json.loads(key_path):
        entry = entry[key]
    params = StdioServerParameters(
        command=entry["command"],
        args=entry.get("args", []),
        env={**os.environ, **entry.get("env", {})},
        cwd=entry.get("cwd"),
    )
    with anyio.fail_after(WAIT):
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = await session.list_tools()
                result = await session.call_tool(tool, json.loads(arguments))
                print(
                    json.dumps(
                        {
                            "tools": sorted(t.name for t in tools.tools),
                            "is_error": bool(result.is_error),
                            "text": "".join(
                                c.text for c in result.content if hasattr(c, "text")
                            ),
                        }
                    )
                )


anyio.run(main)
