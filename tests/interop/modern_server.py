"""A small MCP server built on the official Python SDK (mcp==2.3.0) that
serves MCP 2026-07-28 over stdio, for tests of plangate speaking that
revision to an upstream: its log lines reach a caller only when the
request carries a `logLevel` (there is no logging/setLevel at 2026-07-28),
and resource updates travel only on `subscriptions/listen` streams (there
is no resources/subscribe).

    python modern_server.py

Tools: `shout(text)` (a read; logs one debug and one info line about it),
`set_note(text)` (a write; changes the resource `memo://note` and publishes
its update), `add_echo()` (a write; adds the tool `echo` and publishes the
tool list change). Resource: `memo://note`.
"""

from __future__ import annotations

import warnings

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

# Logging is deprecated at 2026-07-28 but still served; the warning would
# only fill plangate's log with the upstream's stderr.
warnings.filterwarnings("ignore", message="The logging capability is deprecated")

server = MCPServer("modern-notes")
note = {"text": "nothing yet"}


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def shout(text: str, ctx: Context) -> str:
    """Says `text` louder, and logs that it did."""
    await ctx.log("debug", f"debug: shouting {text}")
    await ctx.log("info", f"info: shouted {text}")
    return text.upper()


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
async def set_note(text: str, ctx: Context) -> str:
    """Replaces the note (resource memo://note)."""
    note["text"] = text
    await ctx.notify_resource_updated("memo://note")
    return "noted"


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
async def add_echo(ctx: Context) -> str:
    """Adds the tool `echo` and tells listen streams that the tool list
    changed."""

    def echo(text: str) -> str:
        """Says `text` back."""
        return text

    server.add_tool(echo, annotations=ToolAnnotations(readOnlyHint=True))
    await ctx.notify_tools_changed()
    return "added"


@server.resource("memo://note", name="note", mime_type="text/plain")
def read_note() -> str:
    """The current note."""
    return note["text"]


if __name__ == "__main__":
    server.run("stdio")
