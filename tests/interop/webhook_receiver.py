"""A webhook receiver for plangate's notification tests: verifies each
POST with the Standard Webhooks reference library (standardwebhooks) and
the secret in WEBHOOK_SECRET, answers 204 when it verifies and 401 when it
does not, and appends one JSON line per request to FILE: the headers
plangate sent, the body, and whether it verified.

    python webhook_receiver.py PORT FILE

It listens on 127.0.0.1 only and prints `listening PORT` once ready.
"""

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

HOOK = Webhook(os.environ["WEBHOOK_SECRET"])
HEARD = sys.argv[2]


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length)
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            HOOK.verify(body, headers)
            verified = True
        except WebhookVerificationError as e:
            verified = str(e)
        line = json.dumps(
            {
                "path": self.path,
                "webhook-id": headers.get("webhook-id"),
                "webhook-timestamp": headers.get("webhook-timestamp"),
                "webhook-signature": headers.get("webhook-signature"),
                "verified": verified,
                "body": body.decode("utf-8"),
            }
        )
        with open(HEARD, "a", encoding="utf-8") as f:
            f.write(line + "\n")
        self.send_response(204 if verified is True else 401)
        self.end_headers()

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    port = int(sys.argv[1])
    server = ThreadingHTTPServer(("127.0.0.1", port), Receiver)
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()
