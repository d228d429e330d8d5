/*
 * lsp.c — `sflowc --lsp`: a language server over stdio.
 *
 * JSON-RPC 2.0 with Content-Length framing (LSP 3.17).  Documents are kept
 * whole (full sync).  Every request re-runs the same front end as the
 * command line on the document's current text — it is fast enough that
 * caching would only add ways to be stale — and answers from the fresh,
 * checked AST.  This file holds the transport and the dispatch; the
 * documents, positions and the analysis are lsp_doc.c's, which every
 * handler file uses; the answers live in lsp_find.c (hover,
 * definition, document symbols), lsp_complete.c (completion, signature
 * help), lsp_refs.c (references, rename, workspace symbols) and fmt.c
 * (formatting).  Positions are UTF-16 code units, as the protocol requires
 * unless another encoding is negotiated.
 *
 * Malformed input never ends the server: a bad header is skipped, bad JSON
 * gets a JSON-RPC parse error, unknown methods get "method not found".
 */
#include "lsp.h"

#include <strings.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MESSAGE (64 << 20)

static bool shutting_down;

/* ------------------------------------------------------------ transport */

static void send_json(cJSON *msg) {
  char *s = cJSON_PrintUnformatted(msg);
  if (!s)
    return;
  printf("Content-Length: %zu\r\n\r\n%s", strlen(s), s);
  fflush(stdout);
  free(s);
}

static void respond(cJSON *id, cJSON *result) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "jsonrpc", "2.0");
  cJSON_AddItemToObject(m, "id", id ? cJSON_Duplicate(id, 1) : cJSON_CreateNull());
  cJSON_AddItemToObject(m, "result", result ? result : cJSON_CreateNull());
  send_json(m);
  cJSON_Delete(m);
}

static void respond_error(cJSON *id, int code, const char *msg) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "jsonrpc", "2.0");
  cJSON_AddItemToObject(m, "id", id ? cJSON_Duplicate(id, 1) : cJSON_CreateNull());
  cJSON *e = cJSON_AddObjectToObject(m, "error");
  cJSON_AddNumberToObject(e, "code", code);
  cJSON_AddStringToObject(e, "message", msg);
  send_json(m);
  cJSON_Delete(m);
}

/* Reads one framed message body; NULL at end of input.  Headers other
 * than Content-Length are ignored; a message without one is skipped. */
static char *read_message(size_t *len) {
  for (;;) {
    long clen = -1;
    char line[1024];
    bool any = false;
    while (fgets(line, sizeof line, stdin)) {
      any = true;
      if (!strcmp(line, "\r\n") || !strcmp(line, "\n"))
        break;
      if (!strncasecmp(line, "Content-Length:", 15)) {
        char *end;
        clen = strtol(line + 15, &end, 10);
        if (end == line + 15)
          clen = -1;
      }
    }
    if (!any)
      return NULL;
    if (clen < 0 || clen > MAX_MESSAGE) {
      if (feof(stdin))
        return NULL;
      fprintf(stderr, "sflowc --lsp: ignoring a message without a valid Content-Length\n");
      continue;
    }
    char *body = malloc((size_t)clen + 1);
    if (!body)
      return NULL;
    size_t got = fread(body, 1, (size_t)clen, stdin);
    body[got] = 0;
    if (got < (size_t)clen) {
      free(body);
      return NULL;
    }
    *len = got;
    return body;
  }
}

static void publish(Doc *doc) {
  cJSON *diags = cJSON_CreateArray();
  lsp_analyze(doc, diags);
  /* A std module opened through go to definition is sflowc's own source,
   * which only checks as a std module: nothing there for the user to fix. */
  if (lsp_is_std_copy(lsp_uri_to_path(doc->uri))) {
    cJSON_Delete(diags);
    diags = cJSON_CreateArray();
  }
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "jsonrpc", "2.0");
  cJSON_AddStringToObject(m, "method", "textDocument/publishDiagnostics");
  cJSON *p = cJSON_AddObjectToObject(m, "params");
  cJSON_AddStringToObject(p, "uri", doc->uri);
  cJSON_AddItemToObject(p, "diagnostics", diags);
  send_json(m);
  cJSON_Delete(m);
}

/* ------------------------------------------------------------- dispatch */

static cJSON *capabilities(void) {
  cJSON *r = cJSON_CreateObject();
  cJSON *caps = cJSON_AddObjectToObject(r, "capabilities");
  cJSON *sync = cJSON_AddObjectToObject(caps, "textDocumentSync");
  cJSON_AddBoolToObject(sync, "openClose", 1);
  cJSON_AddNumberToObject(sync, "change", 1); /* full */
  cJSON_AddBoolToObject(caps, "documentSymbolProvider", 1);
  cJSON_AddBoolToObject(caps, "workspaceSymbolProvider", 1);
  cJSON_AddBoolToObject(caps, "definitionProvider", 1);
  cJSON_AddBoolToObject(caps, "hoverProvider", 1);
  cJSON_AddBoolToObject(caps, "referencesProvider", 1);
  cJSON_AddBoolToObject(caps, "documentFormattingProvider", 1);
  cJSON *ren = cJSON_AddObjectToObject(caps, "renameProvider");
  cJSON_AddBoolToObject(ren, "prepareProvider", 0);
  cJSON *comp = cJSON_AddObjectToObject(caps, "completionProvider");
  cJSON *trig = cJSON_AddArrayToObject(comp, "triggerCharacters");
  cJSON_AddItemToArray(trig, cJSON_CreateString("."));
  cJSON_AddItemToArray(trig, cJSON_CreateString("@"));
  cJSON *sig = cJSON_AddObjectToObject(caps, "signatureHelpProvider");
  trig = cJSON_AddArrayToObject(sig, "triggerCharacters");
  cJSON_AddItemToArray(trig, cJSON_CreateString("("));
  cJSON_AddItemToArray(trig, cJSON_CreateString(","));
  cJSON_AddStringToObject(caps, "positionEncoding", "utf-16");
  cJSON *info = cJSON_AddObjectToObject(r, "serverInfo");
  cJSON_AddStringToObject(info, "name", "sflowc");
  cJSON_AddStringToObject(info, "version", SFLOW_VERSION);
  return r;
}

/* The whole document replaced by its canonical layout, or no edits when it
 * already is; NULL (an error) when it does not lex. */
static cJSON *formatting(Doc *d, const char **err) {
  const char *why = NULL;
  char *out = fmt_text(lsp_uri_to_path(d->uri), d->text, d->len, &why);
  if (!out) {
    *err = arena_printf("cannot format: %s", why ? why : "the file does not lex");
    return NULL;
  }
  cJSON *edits = cJSON_CreateArray();
  if (strlen(out) != d->len || memcmp(out, d->text, d->len)) {
    int lines = 0;
    for (size_t i = 0; i < d->len; i++)
      lines += d->text[i] == '\n';
    cJSON *e = cJSON_CreateObject();
    cJSON *r = cJSON_AddObjectToObject(e, "range");
    cJSON *st = cJSON_AddObjectToObject(r, "start");
    cJSON_AddNumberToObject(st, "line", 0);
    cJSON_AddNumberToObject(st, "character", 0);
    /* One line past the last covers the last line whatever its length. */
    cJSON *en = cJSON_AddObjectToObject(r, "end");
    cJSON_AddNumberToObject(en, "line", lines + 1);
    cJSON_AddNumberToObject(en, "character", 0);
    cJSON_AddStringToObject(e, "newText", out);
    cJSON_AddItemToArray(edits, e);
  }
  free(out);
  return edits;
}

static void remember_root(cJSON *params) {
  const char *uri = lsp_str_at(params, "rootUri", NULL);
  const char *path = uri ? lsp_uri_to_path(uri) : lsp_str_at(params, "rootPath", NULL);
  free(lsp_root);
  lsp_root = path ? strdup(path) : NULL;
}

/* Requests about one open document. */
static void document_request(const char *method, cJSON *id, cJSON *params) {
  const char *uri = lsp_str_at(params, "textDocument", "uri");
  Doc *d = uri ? lsp_doc_find(uri) : NULL;
  if (!d) {
    respond_error(id, -32602, "unknown document (send textDocument/didOpen first)");
    return;
  }
  const char *err = NULL;
  cJSON *r;
  if (!strcmp(method, "textDocument/completion")) {
    r = lsp_completion(d, params);
  } else if (!strcmp(method, "textDocument/signatureHelp")) {
    r = lsp_signature_help(d, params);
  } else if (!strcmp(method, "textDocument/references")) {
    r = lsp_references(d, params, &err);
  } else if (!strcmp(method, "textDocument/rename")) {
    r = lsp_rename(d, params, &err);
  } else if (!strcmp(method, "textDocument/formatting")) {
    r = formatting(d, &err);
  } else {
    Analysis a = lsp_analyze(d, NULL);
    r = !strcmp(method, "textDocument/documentSymbol") ? lsp_document_symbols(&a)
      : !strcmp(method, "textDocument/definition") ? lsp_definition(&a, params)
      : lsp_hover(&a, params);
  }
  if (err)
    respond_error(id, -32803, err); /* RequestFailed */
  else
    respond(id, r);
}

static bool is_document_request(const char *m) {
  static const char *const names[] = {
      "textDocument/documentSymbol", "textDocument/definition", "textDocument/hover",
      "textDocument/completion",     "textDocument/signatureHelp", "textDocument/references",
      "textDocument/rename",         "textDocument/formatting"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    if (!strcmp(m, names[i]))
      return true;
  return false;
}

/* Returns false when the server should exit. */
static bool handle(cJSON *msg, int *exit_code) {
  cJSON *id = cJSON_GetObjectItem(msg, "id");
  const char *method = lsp_str_at(msg, "method", NULL);
  cJSON *params = cJSON_GetObjectItem(msg, "params");
  if (!method) {
    if (id)
      respond_error(id, -32600, "invalid request: no method");
    return true;
  }
  if (!strcmp(method, "initialize")) {
    remember_root(params);
    respond(id, capabilities());
  } else if (!strcmp(method, "initialized") || !strcmp(method, "$/cancelRequest") ||
             !strcmp(method, "workspace/didChangeConfiguration") || !strcmp(method, "$/setTrace") ||
             !strcmp(method, "textDocument/didSave")) {
  } else if (!strcmp(method, "shutdown")) {
    shutting_down = true;
    respond(id, NULL);
  } else if (!strcmp(method, "exit")) {
    *exit_code = shutting_down ? 0 : 1;
    return false;
  } else if (!strcmp(method, "textDocument/didOpen") || !strcmp(method, "textDocument/didChange")) {
    const char *uri = lsp_str_at(params, "textDocument", "uri");
    const char *text = lsp_str_at(params, "textDocument", "text");
    if (!text) {
      cJSON *changes = cJSON_GetObjectItem(params, "contentChanges");
      cJSON *last = cJSON_GetArrayItem(changes, cJSON_GetArraySize(changes) - 1);
      text = lsp_str_at(last, "text", NULL);
    }
    if (uri && text) {
      lsp_doc_set(uri, text);
      publish(lsp_doc_find(uri));
    }
  } else if (!strcmp(method, "textDocument/didClose")) {
    const char *uri = lsp_str_at(params, "textDocument", "uri");
    if (uri)
      lsp_doc_close(uri);
  } else if (is_document_request(method)) {
    document_request(method, id, params);
  } else if (!strcmp(method, "workspace/symbol")) {
    respond(id, lsp_workspace_symbols(params));
  } else if (id) {
    respond_error(id, -32601, arena_printf("method not found: %s", method));
  }
  return true;
}

int lsp_main(void) {
  diag_init(DIAG_HUMAN, 0);
  int exit_code = 1; /* end of input without exit is an error, per the spec */
  size_t len;
  char *body;
  while ((body = read_message(&len))) {
    cJSON *msg = cJSON_ParseWithLength(body, len);
    free(body);
    if (!msg || !cJSON_IsObject(msg)) {
      respond_error(NULL, -32700, "parse error: the message is not a JSON object");
      cJSON_Delete(msg);
      continue;
    }
    bool go_on = handle(msg, &exit_code);
    cJSON_Delete(msg);
    if (!go_on)
      return exit_code;
  }
  return shutting_down ? 0 : 1;
}
