"""plangate as the client under test of the conformance suite's client
scenarios: `conformance client --command "python client.py" --scenario S`
appends the scenario server's URL. This starts `plangate serve --stdio`
with that URL as its one upstream and, as an agent would, drives the
scenario through plangate with the official MCP Python SDK: initialize,
list tools, call the scenario's tool (arguments a=2, b=3, as the suite's
own example client does), answer an elicitation by accepting with the
schema's defaults. What the suite checks is what reaches its server:
plangate's own client side.

Environment: PLANGATE_BIN (the binary), MCP_CONFORMANCE_SCENARIO and
MCP_CONFORMANCE_PROTOCOL_VERSION (set by the suite; plangate speaks that
revision to the scenario's server: `protocol` in its config).
"""

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client


async def accept_with_defaults(context, params):
    """Accepts as a person filling the form would: every field the schema
    gives a default keeps it, a yes/no question is answered yes."""
    schema = getattr(params, "requested_schema", None) or {}
    content = {}
    for name, prop in (schema.get("properties") or {}).items():
        if not isinstance(prop, dict):
            continue
        if "default" in prop:
            content[name] = prop["default"]
        elif prop.get("type") == "boolean":
            content[name] = True
    return types.ElicitResult(action="accept", content=content)


# What the agent calls in each scenario, as the suite's own example client
# does (examples/clients/typescript/everything-client.ts); a scenario may
# also name its calls in MCP_CONFORMANCE_CONTEXT (`toolCalls`).
SCENARIO_CALLS = {
    "http-invalid-tool-headers": [("valid_tool", {"region": "us-west1"})],
    "sep-2322-client-request-state": [
        ("test_mrtr_echo_state", {}),
        ("test_mrtr_unrelated", {}),
        ("test_mrtr_no_state", {}),
        ("test_mrtr_no_result_type", {}),
    ],
}


async def drive(url: str, scenario: str, plangate: str, work: Path) -> None:
    data = work / "data"
    config = work / "plangate.toml"
    # The revision the suite runs the scenario at is the one plangate
    # speaks to the scenario's server.
    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "2025-11-25")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    text = f'[upstreams.server]\nurl = "{url}"\nprotocol = "{version}"\n'
    if scenario.startswith("auth/"):
        # The scenario's server is behind OAuth: plangate signs in to it
        # first (`plangate upstream login`), with the client the scenario
        # registered beforehand when it names one.
        text += "[upstreams.server.oauth]\n"
        # In the Client ID Metadata Document scenarios the operator serves
        # plangate's document at the URL the suite's authorization server
        # knows (`plangate upstream client-metadata URL` prints it), and
        # plangate signs in by it; elsewhere it registers dynamically, as
        # with no document (most of the suite's servers would take one, and
        # dynamic registration would then go untested).
        if "cimd" in scenario:
            text += f'client_metadata_url = "{CLIENT_METADATA_URL}"\n'
        for field in ("client_id", "client_secret"):
            if context.get(field):
                text += f'{field} = {json.dumps(context[field])}\n'
        # A machine client gets its own tokens: no person, no login.
        machine = "client-credentials" in scenario
        if machine:
            text += 'grant = "client_credentials"\n'
    config.write_text(text)
    env = dict(os.environ, PLANGATE_DATA_DIR=str(data))
    if scenario.startswith("auth/") and not machine:
        await login(plangate, config, env)
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
            if scenario.startswith("auth/") and not theirs:
                # The upstream is down: the person asks plangate why, and
                # runs the sign-in it names (the upstream moved to another
                # authorization server, say); plangate reconnects as soon
                # as the new sign-in is in the store.
                command = check_names_sign_in(plangate, config, env)
                if command:
                    await login(plangate, config, env, command)
                    theirs = await tools_when_up(session)
            if scenario == "initialize":
                return
            calls = [(c["name"], c.get("arguments") or {}) for c in context.get("toolCalls") or []]
            calls = calls or SCENARIO_CALLS.get(scenario) or [(t.name, {"a": 2, "b": 3}) for t in theirs[:1]]
            for name, arguments in calls:
                result = await session.call_tool(name, arguments)
                # An upstream that refused plangate's sign-in (a step-up to
                # more scopes, a move to another authorization server)
                # needs a person: plangate's answer names the command, the
                # person runs it, and the agent calls again.
                for _ in range(2):
                    command = sign_in_asked(result)
                    if not command:
                        break
                    print(f"plangate said: {refusal(result)['message']}", file=sys.stderr)
                    await login(plangate, config, env, command)
                    result = await call_when_up(session, name, arguments)
                print(json.dumps({"tool": name, "is_error": result.is_error}), file=sys.stderr)


CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"


def refusal(result) -> dict:
    """plangate's refusal (isError, structured content with a code), or {}."""
    body = result.structured_content if result.is_error else None
    return body if isinstance(body, dict) and "code" in body else {}


def sign_in_asked(result) -> list:
    """The `plangate upstream login …` arguments a refusal tells a person
    to run, or []."""
    message = refusal(result).get("message", "")
    match = re.search(r"`plangate upstream login ([^`]*)`", message)
    return shlex.split(match.group(1)) if match else []


def check_names_sign_in(plangate: str, config: Path, env: dict) -> list:
    """`plangate config check`, as a person asks why an upstream is down:
    the `plangate upstream login …` arguments it names, or []."""
    checked = subprocess.run(
        [plangate, "config", "check", "--config", str(config)],
        env=env, capture_output=True, text=True,
    )
    print(checked.stdout + checked.stderr, file=sys.stderr)
    match = re.search(r"`plangate upstream login ([^`]*)`", checked.stdout + checked.stderr)
    return shlex.split(match.group(1)) if match else []


async def tools_when_up(session) -> list:
    """The upstream's tools, once plangate has reconnected it."""
    for _ in range(30):
        tools = (await session.list_tools()).tools
        theirs = [t for t in tools if not t.name.startswith("plangate_")]
        if theirs:
            return theirs
        await asyncio.sleep(0.5)
    return []


async def call_when_up(session, name: str, arguments: dict):
    """Calls again, waiting (as a person would) while plangate reconnects
    the upstream with the new sign-in."""
    for _ in range(20):
        result = await session.call_tool(name, arguments)
        body = refusal(result)
        if body.get("code") != "upstream_down":
            return result
        await asyncio.sleep(0.5)
    return result


async def login(plangate: str, config: Path, env: dict, args: list = ("server",)) -> None:
    """`plangate upstream login server`, with this process as the person's
    browser: the suite's authorization server approves at once, so
    following its redirects brings the code back to plangate's loopback
    listener."""
    import httpx2

    proc = subprocess.Popen(
        [plangate, "upstream", "login", *args, "--config", str(config), "--timeout", "60s"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    url = proc.stdout.readline().strip()
    if url:
        async with httpx2.AsyncClient(follow_redirects=True, timeout=30) as http:
            try:
                await http.get(url)
            except httpx2.HTTPError as e:
                print(f"login: following the authorization URL: {e}", file=sys.stderr)
    _, err = proc.communicate(timeout=90)
    print(err, file=sys.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"plangate upstream login failed ({proc.returncode})")


def main() -> None:
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    plangate = os.environ["PLANGATE_BIN"]
    with tempfile.TemporaryDirectory(prefix="plangate-conformance-client-") as work:
        asyncio.run(drive(url, scenario, plangate, Path(work)))


if __name__ == "__main__":
    main()
