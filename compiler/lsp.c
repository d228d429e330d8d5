/*
 * lsp.c — `sflowc --lsp`: a language server over stdio.
 *
 * JSON-RPC 2.0 with Content-Length framing (LSP 3.17).  Documents are kept
 * whole (full sync).  Every request re-runs the same front end as the
 * command line on the document's current text — it is fast enough that
 * caching would only add ways to be stale — and answers from the fresh,
 * checked AST.  This file holds the transport, the documents, positions,
 * the analysis and the dispatch; the answers live in lsp_find.c (hover,
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

Doc *lsp_docs;
char *lsp_root;
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

/* ------------------------------------------------------------ documents */

Doc *lsp_doc_find(const char *uri) {
  for (Doc *d = lsp_docs; d; d = d->next)
    if (!strcmp(d->uri, uri))
      return d;
  return NULL;
}

static void doc_set(const char *uri, const char *text) {
  Doc *d = lsp_doc_find(uri);
  if (!d) {
    d = calloc(1, sizeof(Doc));
    if (!d)
      return;
    d->uri = strdup(uri);
    d->next = lsp_docs;
    lsp_docs = d;
  }
  free(d->text);
  d->text = strdup(text);
  d->len = strlen(text);
}

static void doc_close(const char *uri) {
  for (Doc **p = &lsp_docs; *p; p = &(*p)->next)
    if (!strcmp((*p)->uri, uri)) {
      Doc *d = *p;
      *p = d->next;
      free(d->uri);
      free(d->text);
      free(d);
      return;
    }
}

/* file:///a/b%20c.sflow -> /a/b c.sflow (arena) */
const char *lsp_uri_to_path(const char *uri) {
  const char *p = !strncmp(uri, "file://", 7) ? uri + 7 : uri;
  Buf b = {0};
  for (; *p; p++) {
    if (*p == '%' && p[1] && p[2]) {
      char hex[3] = {p[1], p[2], 0};
      buf_putc(&b, (char)strtol(hex, NULL, 16));
      p += 2;
    } else {
      buf_putc(&b, *p);
    }
  }
  char *s = arena_strdup(b.data ? b.data : "");
  buf_free(&b);
  return s;
}

const char *lsp_path_to_uri(const char *path) {
  Buf b = {0};
  buf_puts(&b, "file://");
  for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
    if (*p == ' ' || *p == '%' || *p == '#' || *p == '?' || *p >= 0x80)
      buf_printf(&b, "%%%02X", *p);
    else
      buf_putc(&b, (char)*p);
  }
  char *s = arena_strdup(b.data);
  buf_free(&b);
  return s;
}

/* ------------------------------------------------------------ positions */

/* UTF-16 code units from the start of loc's line to byte offset off. */
static int utf16_col(Source *s, int off) {
  int a = off;
  while (a > 0 && s->text[a - 1] != '\n')
    a--;
  int units = 0;
  for (int i = a; i < off && (size_t)i < s->len;) {
    unsigned char c = (unsigned char)s->text[i];
    int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    units += n == 4 ? 2 : 1;
    i += n;
  }
  return units;
}

cJSON *lsp_position(Source *s, int line, int off) {
  cJSON *p = cJSON_CreateObject();
  cJSON_AddNumberToObject(p, "line", line > 0 ? line - 1 : 0);
  cJSON_AddNumberToObject(p, "character", s ? utf16_col(s, off) : 0);
  return p;
}

cJSON *lsp_range(Loc loc) {
  Source *s = src_get(loc.file);
  cJSON *r = cJSON_CreateObject();
  cJSON_AddItemToObject(r, "start", lsp_position(s, loc.line, loc.off));
  int end = loc.off + (loc.len > 0 ? loc.len : 0);
  int line = loc.line;
  /* A span that crosses lines ends on a later line: count them. */
  for (int i = loc.off; s && i < end && (size_t)i < s->len; i++)
    if (s->text[i] == '\n')
      line++;
  cJSON_AddItemToObject(r, "end", lsp_position(s, line, end));
  return r;
}

/* LSP (line, UTF-16 character) to a byte offset in s. */
int lsp_offset_of(Source *s, int line, int character) {
  size_t i = 0;
  for (int l = 0; l < line && i < s->len; i++)
    if (s->text[i] == '\n')
      l++;
  int units = 0;
  while (i < s->len && s->text[i] != '\n' && units < character) {
    unsigned char c = (unsigned char)s->text[i];
    int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    units += n == 4 ? 2 : 1;
    i += (size_t)n;
  }
  return (int)i;
}

/* ------------------------------------------------------------- analysis */

typedef struct {
  cJSON *diags;
  int file;
} Collect;

static void collect_diag(void *ctx, DiagLevel lvl, Loc loc, const char *msg) {
  Collect *c = ctx;
  if (lvl == DIAG_NOTE && cJSON_GetArraySize(c->diags) > 0) {
    /* Notes become related information of the diagnostic before them. */
    cJSON *last = cJSON_GetArrayItem(c->diags, cJSON_GetArraySize(c->diags) - 1);
    cJSON *rel = cJSON_GetObjectItem(last, "relatedInformation");
    if (!rel)
      rel = cJSON_AddArrayToObject(last, "relatedInformation");
    Source *s = src_get(loc.file);
    cJSON *ri = cJSON_CreateObject();
    cJSON *where = cJSON_AddObjectToObject(ri, "location");
    cJSON_AddStringToObject(where, "uri", s ? lsp_path_to_uri(s->path) : "");
    cJSON_AddItemToObject(where, "range", lsp_range(loc));
    cJSON_AddStringToObject(ri, "message", msg);
    cJSON_AddItemToArray(rel, ri);
    return;
  }
  cJSON *d = cJSON_CreateObject();
  Loc at = loc;
  const char *text = msg;
  if (loc.file != c->file) {
    /* An error inside an imported module: show it at the file's start. */
    Source *s = src_get(loc.file);
    at = (Loc){c->file, 1, 1, 0, 0};
    text = arena_printf("in %s:%d:%d: %s", s ? s->path : "?", loc.line, loc.col, msg);
  }
  cJSON_AddItemToObject(d, "range", lsp_range(at));
  cJSON_AddNumberToObject(d, "severity", lvl == DIAG_ERROR ? 1 : lvl == DIAG_WARNING ? 2 : 3);
  cJSON_AddStringToObject(d, "source", "sflowc");
  cJSON_AddStringToObject(d, "message", text);
  cJSON_AddItemToArray(c->diags, d);
}

/* Runs the front end on text as the file path.  Everything from the
 * previous analysis is freed first, so results are valid until the next
 * call.  Sema runs only on a program without syntax errors; it keeps going
 * after a type error, so the types of everything else are still there. */
static Analysis run_front_end(const char *path, const char *text, size_t len, cJSON *diags, bool check) {
  char *keep_path = strdup(path); /* path may live in the arena freed below */
  arena_free_all();
  types_reset();
  src_reset();
  diag_reset();
  Analysis a = {0};
  Collect c = {diags ? diags : cJSON_CreateArray(), 0};
  diag_set_sink(collect_diag, &c);
  a.file = src_add(arena_strdup(keep_path), text, len, "");
  free(keep_path);
  c.file = a.file;
  a.prog.main = parse_source(a.file);
  a.parsed = diag_error_count() == 0;
  a.ok = a.parsed && check && sema_program(&a.prog) && diag_error_count() == 0;
  diag_set_sink(NULL, NULL);
  if (!diags)
    cJSON_Delete(c.diags);
  return a;
}

Analysis lsp_analyze_text(const char *path, const char *text, size_t len, cJSON *diags) {
  return run_front_end(path, text, len, diags, true);
}

Analysis lsp_parse_text(const char *path, const char *text, size_t len) {
  return run_front_end(path, text, len, NULL, false);
}

Analysis lsp_analyze(Doc *doc, cJSON *diags) {
  return lsp_analyze_text(lsp_uri_to_path(doc->uri), doc->text, doc->len, diags);
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

const char *lsp_str_at(cJSON *obj, const char *a, const char *b) {
  cJSON *x = cJSON_GetObjectItem(obj, a);
  if (b)
    x = cJSON_GetObjectItem(x, b);
  return cJSON_IsString(x) ? x->valuestring : NULL;
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
      doc_set(uri, text);
      publish(lsp_doc_find(uri));
    }
  } else if (!strcmp(method, "textDocument/didClose")) {
    const char *uri = lsp_str_at(params, "textDocument", "uri");
    if (uri)
      doc_close(uri);
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
