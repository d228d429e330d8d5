// A stand-in for the VS Code host API, just what grammar/vscode/extension.js
// calls; vscode_test.py runs the extension under node with it.  It records
// the registered commands and errors shown.
'use strict';
const state = { commands: {}, errors: [], config: {} };
module.exports = {
  __state: state,
  workspace: { getConfiguration: () => ({ get: (k) => state.config[k] }) },
  commands: { registerCommand: (name, f) => { state.commands[name] = f; return { dispose() {} }; } },
  window: { showErrorMessage: (m) => state.errors.push(m) },
};
