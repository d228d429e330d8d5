/*
 * lsp_doc.c — what every part of the language server stands on: the open
 * documents, LSP positions (UTF-16 columns) and URIs, and the analysis
 * (the command line's front end run on a document's text, its
 * diagnostics collected as LSP wants them).  lsp.c dispatches requests to
 * lsp_find.c, lsp_complete.c and lsp_refs.c; all of them call down into
 * this file and none calls back up (compiler/files_call_one_way).
 */
#include "lsp.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

Doc *lsp_docs;
char *lsp_root;

/* ------------------------------------------------------------ documents */

Doc *lsp_doc_find(const char *uri) {
  for (Doc *d = lsp_docs; d; d = d->next)
    if (!strcmp(d->uri, uri))
      return d;
  return NULL;
}

void lsp_doc_set(const char *uri, const char *text) {
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

void lsp_doc_close(const char *uri) {
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

const char *lsp_str_at(cJSON *obj, const char *a, const char *b) {
  cJSON *x = cJSON_GetObjectItem(obj, a);
  if (b)
    x = cJSON_GetObjectItem(x, b);
  return cJSON_IsString(x) ? x->valuestring : NULL;
}
