// Preloaded (NODE_OPTIONS=--require) into the reference server: it listens
// on every interface by default, and tests bind to 127.0.0.1 only. A
// listen() given a port and no host gets 127.0.0.1.
const net = require('node:net');
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const [first, second] = args;
  if ((typeof first === 'number' || (typeof first === 'string' && /^\d+$/.test(first))) &&
      typeof second !== 'string') {
    args.splice(1, 0, '127.0.0.1');
  } else if (first && typeof first === 'object' && !first.host && !first.path) {
    args[0] = { ...first, host: '127.0.0.1' };
  }
  return listen.apply(this, args);
};
