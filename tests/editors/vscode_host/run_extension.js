// Activates grammar/vscode/extension.js with the stand-ins beside it (vscode.js, languageclient.js)
// and prints what happened as JSON (vscode_test.py checks it).
'use strict';
const path = require('path');
const Module = require('module');
const here = __dirname;
// The extension's require('vscode') and require('vscode-languageclient/node')
// resolve to the stand-ins.
const resolve = Module._resolveFilename;
Module._resolveFilename = function (req, parent, ...rest) {
  if (req === 'vscode') return path.join(here, 'vscode.js');
  if (req === 'vscode-languageclient/node') return path.join(here, 'languageclient.js');
  return resolve.call(this, req, parent, ...rest);
};
const vscode = require('vscode');
vscode.__state.config['server.path'] = process.argv[3];
const ext = require(process.argv[2]);
const context = { subscriptions: [] };
ext.activate(context);
const lc = require('vscode-languageclient/node').LanguageClient;
const c = lc.last;
const done = (extra) => {
  const out = Object.assign({ commands: Object.keys(vscode.__state.commands), errors: vscode.__state.errors,
                              server: c ? c.server : null, selector: c ? c.options.documentSelector : null }, extra);
  console.log(JSON.stringify(out));
  if (c) c.stop();
  process.exit(0); // stdout to a pipe is synchronous on Linux: the line is out
};
if (!c) {
  done({});
} else {
  const timer = setTimeout(() => done({ timeout: true }), 10000);
  c.start().then(() => {
    clearTimeout(timer);
    vscode.__state.commands['sflow.restartServer']();
    done({ capabilities: c.initializeResult.result.capabilities, restarted: !!c.restarted });
  });
}
