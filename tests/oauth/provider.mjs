// A real OAuth 2.1 authorization server for plangate's OAuth tests:
// oidc-provider (pinned in package.json), configured to issue RFC 9068 JWT
// access tokens for the protected resources named on the command line.
//
//   .tools/oauth/node_modules/.bin/node .tools/oauth/provider.mjs --port PORT
//       --resource URL [--resource URL2 ...] [--scopes "mcp:read mcp:plan mcp:write"]
//       [--ttl SECONDS] [--alg ES256|RS256|EdDSA]
//
// scripts/install-peers installs oidc-provider and Node 22 (both pinned in
// package.json) into .tools/oauth and copies this file beside their
// node_modules: ESM imports resolve from the importing file's directory, so
// it runs from there, not from tests/oauth. oidc-provider 9 wants Node 22
// LTS or later (on the system Node 20 it runs but warns "Unsupported
// runtime"), hence the pinned one.
//
// What it serves (everything in memory, gone when the process ends):
// * issuer exactly `http://127.0.0.1:PORT` (no trailing slash), bound to
//   127.0.0.1 only. `--port 0` picks a free port; the line below names it.
// * discovery at /.well-known/openid-configuration and (RFC 8414)
//   /.well-known/oauth-authorization-server, same JSON; JWKS at /jwks.
// * open dynamic client registration at /reg (no initial access token), so
//   MCP clients register themselves (public, loopback redirect URIs).
// * authorization code + PKCE (required, S256) at /auth, with the
//   development login and consent pages: any username is accepted as the
//   account id (the tokens' `sub`), any password.
// * refresh tokens for every client that registered the refresh_token grant.
// * client credentials for the pre-registered confidential client
//   `machine` / `machine-secret` (client_secret_basic or client_secret_post).
// * resource indicators (RFC 8707): each `--resource` is a resource server
//   whose scopes are `--scopes`; the first is the default when a request
//   names none; any other resource is refused (invalid_target).
// * access tokens are JWTs (header typ `at+jwt`, alg `--alg`) with iss, sub,
//   aud (= the resource), exp, iat, jti, client_id, scope, and `email`
//   (`<account>@example.test`) when a person logged in. A client
//   credentials token's `sub` is the client id (`machine`).
// * with `--format opaque`, access tokens are opaque strings instead, which
//   only token introspection (RFC 7662, `/token/introspection`, for a
//   confidential client such as `machine`) reads; the answer carries the
//   same claims. Revocation (RFC 7009, `/token/revocation`) ends them.
//
// stdout carries exactly one line, once listening:
//   oidc-provider listening on http://127.0.0.1:PORT
// All other output (oidc-provider's notices, errors) goes to stderr.
// SIGTERM / SIGINT end it with status 0.

import * as http from 'node:http';
import * as crypto from 'node:crypto';
import { parseArgs } from 'node:util';

import Provider, { errors } from 'oidc-provider';

// oidc-provider prints its notices with console.info, i.e. on stdout: keep
// stdout for the one line a test waits for.
console.log = console.error;
console.info = console.error;
console.debug = console.error;

function usage(msg) {
  process.stderr.write(`provider.mjs: ${msg}\n`);
  process.stderr.write(
    'usage: node provider.mjs --port PORT --resource URL [--resource URL ...] '
      + '[--scopes "mcp:read mcp:plan mcp:write"] [--ttl SECONDS] [--alg ES256|RS256|EdDSA] [--format jwt|opaque]\n',
  );
  process.exit(2);
}

let opts;
try {
  ({ values: opts } = parseArgs({
    options: {
      port: { type: 'string' },
      resource: { type: 'string', multiple: true },
      scopes: { type: 'string', default: 'mcp:read mcp:plan mcp:write' },
      ttl: { type: 'string', default: '3600' },
      alg: { type: 'string', default: 'ES256' },
      format: { type: 'string', default: 'jwt' },
    },
    strict: true,
    allowPositionals: false,
  }));
} catch (err) {
  usage(err.message);
}

if (opts.port === undefined || !/^\d+$/.test(opts.port) || Number(opts.port) > 65535) {
  usage('--port must be a number (0 picks a free port)');
}
const resources = opts.resource ?? [];
if (resources.length === 0) usage('at least one --resource is required');
for (const r of resources) {
  if (!URL.canParse(r)) usage(`--resource ${r} is not an absolute URL`);
}
const scope = opts.scopes.split(/\s+/).filter(Boolean).join(' ');
if (!scope) usage('--scopes must name at least one scope');
const ttl = Number(opts.ttl);
if (!Number.isSafeInteger(ttl) || ttl <= 0) usage('--ttl must be a positive integer (seconds)');
const alg = opts.alg;
if (!['ES256', 'RS256', 'EdDSA'].includes(alg)) usage('--alg must be ES256, RS256 or EdDSA');
const format = opts.format;
if (!['jwt', 'opaque'].includes(format)) usage('--format must be jwt or opaque');

// Bind first (so `--port 0` knows its port before the issuer is fixed), then
// hand requests to the provider once it exists.
let handler = (_req, res) => {
  res.statusCode = 503;
  res.end();
};
const server = http.createServer((req, res) => handler(req, res));
try {
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(Number(opts.port), '127.0.0.1', resolve);
  });
} catch (err) {
  process.stderr.write(`provider.mjs: cannot listen on 127.0.0.1:${opts.port}: ${err.code ?? err.message}\n`);
  process.exit(1);
}
const { port } = server.address();
const issuer = `http://127.0.0.1:${port}`;

// One signing key, made for this run; it signs access tokens and ID tokens.
const { privateKey } = {
  ES256: () => crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' }),
  RS256: () => crypto.generateKeyPairSync('rsa', { modulusLength: 2048 }),
  EdDSA: () => crypto.generateKeyPairSync('ed25519'),
}[alg]();
const jwk = privateKey.export({ format: 'jwk' });
jwk.kid = crypto.randomBytes(8).toString('hex');
jwk.alg = alg;
jwk.use = 'sig';

const resourceServer = (resource) => ({
  scope,
  audience: resource,
  accessTokenTTL: ttl,
  accessTokenFormat: format,
  jwt: { sign: { alg } },
});

const configuration = {
  clients: [
    {
      client_id: 'machine',
      client_secret: 'machine-secret',
      grant_types: ['client_credentials'],
      redirect_uris: [],
      response_types: [],
      token_endpoint_auth_method: 'client_secret_basic',
    },
  ],
  clientDefaults: {
    grant_types: ['authorization_code'],
    id_token_signed_response_alg: alg,
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
  },
  enabledJWA: { idTokenSigningAlgValues: [alg] },
  jwks: { keys: [jwk] },
  cookies: { keys: [crypto.randomBytes(32).toString('hex')] },
  // The resource scopes are listed too: a client registering with
  // `scope: "mcp:read ..."` (the MCP SDK does) is refused otherwise, since
  // registration accepts only scopes the server advertises.
  scopes: ['openid', 'offline_access', ...scope.split(' ')],
  responseTypes: ['code'],
  pkce: { required: () => true },
  features: {
    devInteractions: { enabled: true },
    registration: { enabled: true, initialAccessToken: false },
    clientCredentials: { enabled: true },
    introspection: { enabled: true },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async (_ctx, _client, oneOf) => oneOf ?? resources[0],
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx, resource) => {
        if (resources.includes(resource)) return resourceServer(resource);
        throw new errors.InvalidTarget(`unknown resource ${resource}`);
      },
    },
  },
  // Refresh tokens whenever the client may use them, offline_access or not.
  issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
  extraTokenClaims: async (_ctx, token) => (
    token.accountId ? { email: `${token.accountId}@example.test` } : undefined
  ),
  findAccount: async (_ctx, sub) => ({
    accountId: sub,
    claims: async () => ({ sub, email: `${sub}@example.test` }),
  }),
  ttl: {
    AccessToken: (_ctx, token) => token.resourceServer?.accessTokenTTL ?? ttl,
    ClientCredentials: (_ctx, token) => token.resourceServer?.accessTokenTTL ?? ttl,
    AuthorizationCode: 60,
    IdToken: 3600,
    Interaction: 3600,
    RefreshToken: 14 * 24 * 3600,
    Session: 14 * 24 * 3600,
    Grant: 14 * 24 * 3600,
  },
  clientBasedCORS: () => true,
};

const provider = new Provider(issuer, configuration);
// Refusals on stderr, one line each, to debug a failing test by (never a
// token: these errors carry none).
provider.on('server_error', (_ctx, err) => console.error('oidc-provider server_error:', err));
for (const event of [
  'authorization.error', 'grant.error', 'registration_create.error', 'introspection.error',
  'revocation.error', 'discovery.error', 'jwks.error', 'userinfo.error',
]) {
  provider.on(event, (_ctx, err) => {
    console.error(`oidc-provider ${event}: ${err.error ?? err.name}: ${err.error_description ?? err.message}`);
  });
}
handler = provider.callback();

process.stdout.write(`oidc-provider listening on ${issuer}\n`);

function shutdown() {
  server.close(() => process.exit(0));
  server.closeAllConnections();
  setTimeout(() => process.exit(0), 2000).unref();
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
