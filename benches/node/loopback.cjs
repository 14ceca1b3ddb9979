// Preloaded (NODE_OPTIONS=--require) into Node servers that have no host
// option (supergateway, server-everything): every listen() on a port binds
// 127.0.0.1 only, so the benchmark never opens a port beyond loopback.
'use strict';
const net = require('net');
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const first = args[0];
  if (typeof first === 'number' || (typeof first === 'string' && /^\d+$/.test(first))) {
    if (typeof args[1] === 'string') args[1] = '127.0.0.1';
    else args.splice(1, 0, '127.0.0.1');
  } else if (first && typeof first === 'object' && !Array.isArray(first) && 'port' in first) {
    args[0] = { ...first, host: '127.0.0.1' };
  }
  return listen.apply(this, args);
};
