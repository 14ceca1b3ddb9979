"""The person at the browser for `plangate upstream login`: opens the
authorization URL plangate printed, signs in and consents on the fixture
authorization server's development pages (tests/oauth/provider.mjs) over
HTTP with a cookie jar, and follows the redirect back to plangate's
loopback listener, as a browser would.

    .tools/venv/bin/python tests/oauth/consent.py --user alice URL

Prints what plangate's listener answered on stdout; exit 0 when it
answered 200. The redirect URI is read from the authorization URL.
"""

from __future__ import annotations

import argparse
import sys
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2

from client import WAIT, Failure, page_text, sign_in


async def consent(url: str, user: str, password: str) -> str:
    redirect_uri = parse_qs(urlsplit(url).query)["redirect_uri"][0]
    async with httpx2.AsyncClient(follow_redirects=False, timeout=WAIT) as http:
        location = await sign_in(http, url, redirect_uri, user, password)
        back = await http.get(location)
        if back.status_code != 200:
            raise Failure(f"plangate's listener answered {back.status_code}: {page_text(back.text)}")
        return page_text(back.text)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url", help="the authorization URL plangate printed")
    p.add_argument("--user", required=True, help="the account to sign in as")
    p.add_argument("--password", default="x", help="any password (the dev login accepts all)")
    args = p.parse_args()
    try:
        print(anyio.run(consent, args.url, args.user, args.password))
    except Failure as e:
        print(f"consent.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
