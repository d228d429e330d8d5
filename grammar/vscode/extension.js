// The sflow extension's only code: start the language server, `sflowc --lsp`,
// when sflowc can be found, and the command that restarts it.  Completion,
// signature help, hover, go to definition, references, rename, symbols and
// formatting (Format Document runs `sflowc fmt`'s layout) all come from the
// server through vscode-languageclient.  Highlighting, brackets and comments
// come from package.json's grammar and language configuration and need none
// of this, so every failure here (no sflowc, no node_modules) leaves them
// working.
'use strict';
const fs = require('fs');
const path = require('path');
const vscode = require('vscode');

let client;

// The program as given if it has a slash, else the first match on PATH.
function findProgram(name) {
  const exts = process.platform === 'win32' ? ['.exe', '.cmd', ''] : [''];
  const dirs = name.includes('/') || name.includes('\\')
    ? [''] : (process.env.PATH || '').split(path.delimiter);
  for (const dir of dirs) {
    for (const ext of exts) {
      const file = path.join(dir, name + ext);
      try { fs.accessSync(file, fs.constants.X_OK); return file; } catch (e) { /* next */ }
    }
  }
  return undefined;
}

function activate(context) {
  context.subscriptions.push(vscode.commands.registerCommand('sflow.restartServer', () => {
    if (!client) {
      vscode.window.showErrorMessage('sflow: no language server: sflowc was not found (setting sflow.server.path)');
      return;
    }
    client.restart().catch((e) => vscode.window.showErrorMessage('sflow: restart failed: ' + e));
  }));
  const name = vscode.workspace.getConfiguration('sflow').get('server.path') || 'sflowc';
  const command = findProgram(name);
  if (!command) return;  // highlighting only
  let lc;
  try {
    lc = require('vscode-languageclient/node');
  } catch (e) {
    console.log('sflow: vscode-languageclient is not installed; run npm install here');
    return;
  }
  const server = { command, args: ['--lsp'] };
  client = new lc.LanguageClient('sflow', 'sflow language server', server, {
    documentSelector: [{ scheme: 'file', language: 'sflow' }, { scheme: 'untitled', language: 'sflow' }],
  });
  client.start().catch((e) => console.log('sflow: language server failed: ' + e));
  context.subscriptions.push({ dispose: () => client && client.stop() });
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
