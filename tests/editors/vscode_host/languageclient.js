// A stand-in for vscode-languageclient/node that does what matters here for
// real: start() spawns the server the extension describes and completes the
// LSP initialize handshake with it over stdio, so the test sees the real
// sflowc answer.
'use strict';
const { spawn } = require('child_process');
class LanguageClient {
  constructor(id, name, server, options) {
    Object.assign(this, { id, name, server, options });
    LanguageClient.last = this;
  }
  start() {
    return new Promise((resolve, reject) => {
      const p = spawn(this.server.command, this.server.args);
      this.proc = p;
      let buf = Buffer.alloc(0);
      p.stdout.on('data', (d) => {
        buf = Buffer.concat([buf, d]);
        const head = buf.indexOf('\r\n\r\n');
        if (head < 0) return;
        const n = Number(/Content-Length: (\d+)/i.exec(buf.slice(0, head).toString())[1]);
        if (buf.length < head + 4 + n) return;
        this.initializeResult = JSON.parse(buf.slice(head + 4, head + 4 + n).toString());
        resolve();
      });
      p.on('error', reject);
      const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize',
                                    params: { processId: process.pid, rootUri: null, capabilities: {} } });
      p.stdin.write('Content-Length: ' + Buffer.byteLength(body) + '\r\n\r\n' + body);
    });
  }
  stop() { if (this.proc) { this.proc.stdin.end(); this.proc.kill(); } return Promise.resolve(); }
  restart() { this.restarted = true; return Promise.resolve(); }
}
module.exports = { LanguageClient };
