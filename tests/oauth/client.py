"""An MCP client that logs in with OAuth through the official MCP Python SDK
(mcp==2.3.0, .tools/venv): the SDK's own `OAuthClientProvider` does the
discovery (RFC 9728 protected resource metadata, then RFC 8414 / OpenID
authorization server metadata), the dynamic client registration, PKCE and
the token exchange and refresh. The one thing a person would do - sign in
and consent in a browser - is done here over HTTP against the development
login and consent pages of the fixture authorization server
(tests/oauth/provider.mjs, oidc-provider): any user name, any password.

    .tools/venv/bin/python tests/oauth/client.py --url http://127.0.0.1:PORT/mcp \
        --user alice [--call TOOL ARGS_JSON]... [--pause SECONDS] [--auth-stats]

Prints one JSON object per line on stdout:
    {"tools": [names...]}
    {"call": TOOL, "is_error": bool, "structured": ..., "text": "..."}   (per --call)
    {"auth": {"logins": N, "refreshes": M}}                            (with --auth-stats)
`--pause` sleeps that many seconds before each call, so a short-lived token
(provider --ttl 1) expires and the SDK refreshes it first. Exit 0 on success;
otherwise non-zero with the reason on stderr. No token is ever printed.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import anyio
import httpx2
from mcp import ClientSession, types
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

WAIT = 30.0
# Redirects and pages between the authorization URL and the redirect back.
MAX_STEPS = 20


class Failure(Exception):
    """A failure with a message fit for stderr."""


class MemoryStorage:
    """In-memory TokenStorage; counts token writes to tell refreshes apart."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None
        self.token_writes = 0

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens
        self.token_writes += 1

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class FormParser(HTMLParser):
    """The first <form> of a page: its action and its <input>s."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: dict[str, str] = {}
        self._in_form = False
        self._done = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form" and not self._done and self.action is None:
            self.action = a.get("action", "")
            self._in_form = True
        elif tag == "input" and self._in_form and a.get("name"):
            self.fields[a["name"]] = a.get("value", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self._in_form:
            self._in_form = False
            self._done = True


def unused_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browser:
    """Stands in for the person at the browser: follows the authorization
    URL through oidc-provider's login and consent pages with a cookie jar,
    and stops at the redirect back to the client (nothing listens there)."""

    def __init__(self, user: str, password: str, redirect_uri: str) -> None:
        self.user = user
        self.password = password
        self.redirect_uri = redirect_uri
        self.pending_url: str | None = None
        self.logins = 0

    async def redirect_handler(self, authorization_url: str) -> None:
        self.pending_url = authorization_url

    async def callback_handler(self) -> AuthorizationCodeResult:
        if self.pending_url is None:
            raise Failure("the SDK asked for the callback before giving an authorization URL")
        url, self.pending_url = self.pending_url, None
        async with httpx2.AsyncClient(follow_redirects=False, timeout=WAIT) as http:
            location = await sign_in(http, url, self.redirect_uri, self.user, self.password)
        return self._result(location)

    def _result(self, location: str) -> AuthorizationCodeResult:
        query = parse_qs(urlsplit(location).query)
        one = lambda k: query[k][0] if k in query else None  # noqa: E731
        if one("error"):
            raise Failure(f"authorization refused: {one('error')}: {one('error_description') or ''}")
        code = one("code")
        if not code:
            raise Failure("redirect back to the client carries no code")
        self.logins += 1
        return AuthorizationCodeResult(code=code, state=one("state"), iss=one("iss"))


async def sign_in(http: httpx2.AsyncClient, url: str, redirect_uri: str, user: str, password: str) -> str:
    """Follows the authorization URL through the provider's login and
    consent pages (any user name, any password) with `http`'s cookie jar,
    and returns the redirect back to `redirect_uri` without following it."""
    response = await http.get(url)
    for _ in range(MAX_STEPS):
        if response.is_redirect:
            location = urljoin(str(response.url), response.headers["location"])
            if location.startswith(redirect_uri):
                return location
            response = await http.get(location)
            continue
        if response.status_code != 200:
            raise Failure(
                f"authorization server answered {response.status_code} at "
                f"{urlsplit(str(response.url)).path}: {page_text(response.text)}"
            )
        form = FormParser()
        form.feed(response.text)
        if form.action is None:
            raise Failure(f"no form on the page at {urlsplit(str(response.url)).path}: {page_text(response.text)}")
        data = dict(form.fields)
        if data.get("prompt") == "login":
            data["login"] = user
            data["password"] = password
        response = await http.post(urljoin(str(response.url), form.action), data=data)
    raise Failure(f"no redirect back to the client after {MAX_STEPS} steps")


def page_text(html: str) -> str:
    """A short plain-text excerpt of an HTML page, for error messages."""
    import re

    text = re.sub(r"<style.*?</style>|<script.*?</script>", " ", html, flags=re.S)
    text = re.sub(r"<[^>]+>", " ", text)
    return " ".join(text.split())[:500]


def first_message(exc: BaseException) -> str:
    """The innermost meaningful message of a (possibly grouped) exception."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, Failure):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def run(args: argparse.Namespace) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    for name, raw in args.call or []:
        try:
            arguments = json.loads(raw)
        except json.JSONDecodeError as e:
            raise Failure(f"--call {name}: arguments are not JSON: {e}") from None
        if not isinstance(arguments, dict):
            raise Failure(f"--call {name}: arguments must be a JSON object")
        calls.append((name, arguments))

    redirect_uri = f"http://127.0.0.1:{unused_port()}/callback"
    browser = Browser(args.user, args.password, redirect_uri)
    storage = MemoryStorage()
    auth = OAuthClientProvider(
        server_url=args.url,
        client_metadata=OAuthClientMetadata(
            client_name="plangate oauth test client",
            redirect_uris=[redirect_uri],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=browser.redirect_handler,
        callback_handler=browser.callback_handler,
    )

    async with httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(WAIT, read=120.0)) as http:
        async with streamable_http_client(args.url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                names: list[str] = []
                cursor = None
                while True:
                    page = await session.list_tools(
                        params=types.PaginatedRequestParams(cursor=cursor) if cursor else None
                    )
                    names.extend(t.name for t in page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
                emit({"tools": names})
                for name, arguments in calls:
                    if args.pause:
                        await anyio.sleep(args.pause)
                    result = await session.call_tool(name, arguments)
                    text = "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")
                    emit(
                        {
                            "call": name,
                            "is_error": bool(result.is_error),
                            "structured": result.structured_content,
                            "text": text,
                        }
                    )
    if args.auth_stats:
        emit({"auth": {"logins": browser.logins, "refreshes": max(0, storage.token_writes - browser.logins)}})


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="the MCP endpoint, e.g. http://127.0.0.1:PORT/mcp")
    p.add_argument("--user", required=True, help="the account to sign in as (becomes the token's sub)")
    p.add_argument("--password", default="x", help="any password (the dev login accepts all)")
    p.add_argument(
        "--call", nargs=2, action="append", metavar=("TOOL", "ARGS_JSON"), help="call TOOL with ARGS_JSON; repeatable"
    )
    p.add_argument("--pause", type=float, default=0.0, help="seconds to sleep before each call")
    p.add_argument("--auth-stats", action="store_true", help="end with a line counting logins and refreshes")
    args = p.parse_args()
    try:
        anyio.run(run, args)
    except BaseException as e:  # noqa: BLE001 - report anything, briefly
        if isinstance(e, KeyboardInterrupt):
            raise
        print(f"client.py: {first_message(e)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
