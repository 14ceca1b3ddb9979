"""plangate as the client under test of the conformance suite's client
scenarios: `conformance client --command "python client.py" --scenario S`
appends the scenario server's URL. This starts `plangate serve --stdio`
with that URL as its one upstream and, as an agent would, drives the
scenario through plangate with the official MCP Python SDK: initialize,
list tools, call the scenario's tool (arguments a=2, b=3, as the suite's
own example client does), answer an elicitation by accepting with the
schema's defaults. What the suite checks is what reaches its server:
plangate's own client side.

Environment: PLANGATE_BIN (the binary), MCP_CONFORMANCE_SCENARIO (set by
the suite).
"""

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client


async def accept_with_defaults(context, params):
    """Accepts, filling every field the schema gives a default for."""
    schema = getattr(params, "requested_schema", None) or {}
    content = {
        name: prop["default"]
        for name, prop in (schema.get("properties") or {}).items()
        if isinstance(prop, dict) and "default" in prop
    }
    return types.ElicitResult(action="accept", content=content)


async def drive(url: str, scenario: str, plangate: str, work: Path) -> None:
    data = work / "data"
    config = work / "plangate.toml"
    config.write_text(f'[upstreams.server]\nurl = "{url}"\n')
    env = dict(os.environ, PLANGATE_DATA_DIR=str(data))
    created = subprocess.run(
        [plangate, "keys", "create", "--name", "conformance", "--scope", "write", "--json"],
        env=env, check=True, capture_output=True, text=True,
    )
    env["PLANGATE_KEY"] = json.loads(created.stdout)["token"]
    server = StdioServerParameters(
        command=plangate, args=["serve", "--stdio", "--config", str(config)], env=env
    )
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, elicitation_callback=accept_with_defaults) as session:
            await session.initialize()
            tools = (await session.list_tools()).tools
            theirs = [t for t in tools if not t.name.startswith("plangate_")]
            if scenario == "initialize":
                return
            for tool in theirs[:1]:
                result = await session.call_tool(tool.name, {"a": 2, "b": 3})
                print(json.dumps({"tool": tool.name, "is_error": result.is_error}), file=sys.stderr)


def main() -> None:
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    plangate = os.environ["PLANGATE_BIN"]
    with tempfile.TemporaryDirectory(prefix="plangate-conformance-client-") as work:
        asyncio.run(drive(url, scenario, plangate, Path(work)))


if __name__ == "__main__":
    main()
