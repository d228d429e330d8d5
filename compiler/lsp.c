/*
 * lsp.c — `sflowc --lsp`: a language server over stdio.
 *
 * JSON-RPC 2.0 with Content-Length framing (LSP 3.17).  Documents are kept
 * whole (full sync).  Every request re-runs the same front end as the
 * command line on the document's current text — it is fast enough that
 * caching would only add ways to be stale — and answers from the fresh,
 * checked AST: diagnostics on open and change, document symbols, go to
 * definition and hover with the type.  Positions are UTF-16 code units, as
 * the protocol requires unless another encoding is negotiated.
 *
 * Malformed input never ends the server: a bad header is skipped, bad JSON
 * gets a JSON-RPC parse error, unknown methods get "method not found".
 */
#include "sflowc.h"

#include <cjson/cJSON.h>
#include <strings.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MESSAGE (64 << 20)

typedef struct Doc Doc;
struct Doc {
  char *uri;
  char *text;
  size_t len;
  Doc *next;
};

static Doc *docs;
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

static Doc *doc_find(const char *uri) {
  for (Doc *d = docs; d; d = d->next)
    if (!strcmp(d->uri, uri))
      return d;
  return NULL;
}

static void doc_set(const char *uri, const char *text) {
  Doc *d = doc_find(uri);
  if (!d) {
    d = calloc(1, sizeof(Doc));
    if (!d)
      return;
    d->uri = strdup(uri);
    d->next = docs;
    docs = d;
  }
  free(d->text);
  d->text = strdup(text);
  d->len = strlen(text);
}

static void doc_close(const char *uri) {
  for (Doc **p = &docs; *p; p = &(*p)->next)
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
static const char *uri_to_path(const char *uri) {
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

static const char *path_to_uri(const char *path) {
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

static cJSON *position(Source *s, int line, int off) {
  cJSON *p = cJSON_CreateObject();
  cJSON_AddNumberToObject(p, "line", line > 0 ? line - 1 : 0);
  cJSON_AddNumberToObject(p, "character", s ? utf16_col(s, off) : 0);
  return p;
}

static cJSON *range_of(Loc loc) {
  Source *s = src_get(loc.file);
  cJSON *r = cJSON_CreateObject();
  cJSON_AddItemToObject(r, "start", position(s, loc.line, loc.off));
  int end = loc.off + (loc.len > 0 ? loc.len : 0);
  int line = loc.line;
  /* A span that crosses lines ends on a later line: count them. */
  for (int i = loc.off; s && i < end && (size_t)i < s->len; i++)
    if (s->text[i] == '\n')
      line++;
  cJSON_AddItemToObject(r, "end", position(s, line, end));
  return r;
}

/* LSP (line, UTF-16 character) to a byte offset in s. */
static int offset_of(Source *s, int line, int character) {
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
    cJSON_AddStringToObject(where, "uri", s ? path_to_uri(s->path) : "");
    cJSON_AddItemToObject(where, "range", range_of(loc));
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
  cJSON_AddItemToObject(d, "range", range_of(at));
  cJSON_AddNumberToObject(d, "severity", lvl == DIAG_ERROR ? 1 : lvl == DIAG_WARNING ? 2 : 3);
  cJSON_AddStringToObject(d, "source", "sflowc");
  cJSON_AddStringToObject(d, "message", text);
  cJSON_AddItemToArray(c->diags, d);
}

typedef struct {
  Program prog;
  int file;
  bool ok;
} Analysis;

/* Runs the front end on a document.  Everything from the previous
 * analysis is freed first, so results are valid until the next call. */
static Analysis analyze(Doc *doc, cJSON *diags) {
  arena_free_all();
  types_reset();
  src_reset();
  diag_reset();
  Analysis a = {0};
  Collect c = {diags ? diags : cJSON_CreateArray(), 0};
  diag_set_sink(collect_diag, &c);
  a.file = src_add(uri_to_path(doc->uri), doc->text, doc->len, "");
  c.file = a.file;
  a.prog.main = parse_source(a.file);
  a.ok = diag_error_count() == 0;
  if (a.ok)
    a.ok = sema_program(&a.prog);
  diag_set_sink(NULL, NULL);
  if (!diags)
    cJSON_Delete(c.diags);
  return a;
}

static void publish(Doc *doc) {
  cJSON *diags = cJSON_CreateArray();
  analyze(doc, diags);
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "jsonrpc", "2.0");
  cJSON_AddStringToObject(m, "method", "textDocument/publishDiagnostics");
  cJSON *p = cJSON_AddObjectToObject(m, "params");
  cJSON_AddStringToObject(p, "uri", doc->uri);
  cJSON_AddItemToObject(p, "diagnostics", diags);
  send_json(m);
  cJSON_Delete(m);
}

/* -------------------------------------------------------------- symbols */

enum { SK_CLASS = 5, SK_METHOD = 6, SK_FIELD = 8, SK_CONSTRUCTOR = 9, SK_FUNCTION = 12,
       SK_CONSTANT = 14, SK_STRUCT = 23, SK_MODULE = 2 };

static cJSON *symbol(const char *name, const char *detail, int kind, Loc whole, Loc sel) {
  cJSON *s = cJSON_CreateObject();
  cJSON_AddStringToObject(s, "name", name && *name ? name : "?");
  if (detail)
    cJSON_AddStringToObject(s, "detail", detail);
  cJSON_AddNumberToObject(s, "kind", kind);
  cJSON_AddItemToObject(s, "range", range_of(whole));
  cJSON_AddItemToObject(s, "selectionRange", range_of(sel));
  return s;
}

static Loc decl_extent(Decl *d) {
  Loc l = d->loc;
  if (d->body)
    l = loc_span(l, d->body->loc);
  else if (d->end_loc.line)
    l = loc_span(l, d->end_loc);
  return l;
}

static const char *signature(Decl *d) {
  Buf b = {0};
  static const char *kw[] = {"import", "const", "struct", "fn", "kernel", "task", "actor",
                             "workflow", "var", "param", "init", "fn"};
  buf_printf(&b, "%s %s", kw[d->kind], d->kind == D_INIT ? "init" : d->name);
  if (d->kind == D_FN || d->kind == D_TASK || d->kind == D_KERNEL || d->kind == D_WORKFLOW ||
      d->kind == D_METHOD || d->kind == D_INIT) {
    buf_putc(&b, '(');
    for (Decl *p = d->params; p; p = p->next)
      buf_printf(&b, "%s%s: %s", p == d->params ? "" : ", ", p->name, ty_str(p->type));
    buf_putc(&b, ')');
    if (d->ret_type && d->ret_type->kind != TY_VOID)
      buf_printf(&b, " -> %s", ty_str(d->ret_type));
  } else if (d->kind == D_CONST || d->kind == D_FIELD || d->kind == D_PARAM) {
    buf_printf(&b, ": %s", ty_str(d->type));
  }
  char *s = arena_strdup(b.data);
  buf_free(&b);
  return s;
}

static cJSON *document_symbols(Analysis *a) {
  cJSON *out = cJSON_CreateArray();
  for (Decl *d = a->prog.main->decls; d; d = d->next) {
    int kind;
    switch (d->kind) {
    case D_STRUCT: kind = SK_STRUCT; break;
    case D_ACTOR: kind = SK_CLASS; break;
    case D_CONST: kind = SK_CONSTANT; break;
    case D_IMPORT: kind = SK_MODULE; break;
    default: kind = SK_FUNCTION;
    }
    cJSON *s = symbol(d->kind == D_IMPORT ? d->path : d->name, signature(d), kind, decl_extent(d), d->name_loc);
    if (d->kind == D_STRUCT || d->kind == D_ACTOR) {
      cJSON *kids = cJSON_AddArrayToObject(s, "children");
      for (Decl *f = d->fields; f; f = f->next)
        cJSON_AddItemToArray(kids, symbol(f->name, signature(f), SK_FIELD, f->loc, f->name_loc));
      if (d->init)
        cJSON_AddItemToArray(kids, symbol("init", signature(d->init), SK_CONSTRUCTOR, decl_extent(d->init), d->init->name_loc));
      for (Decl *m = d->methods; m; m = m->next)
        cJSON_AddItemToArray(kids, symbol(m->name, signature(m), SK_METHOD, decl_extent(m), m->name_loc));
    }
    cJSON_AddItemToArray(out, s);
  }
  return out;
}

/* ------------------------------------------------- finding what is under */

typedef struct {
  int file, off;
  Node *node;     /* the innermost name-like node under the cursor */
  TypeExpr *texpr;
  Decl *decl;     /* a declaration whose name is under the cursor */
  Module *mod;
} Hit;

static bool covers(Loc l, int file, int off) {
  return l.file == file && off >= l.off && off <= l.off + (l.len > 0 ? l.len : 0);
}

static void visit_node(Hit *h, Node *n);

/* Names anywhere in a type: the element of an array, the arguments of
 * future<T> and map<K, V>, the parameters and result of fn(...) -> T. */
static void visit_texpr(Hit *h, TypeExpr *t) {
  if (!t)
    return;
  if (t->kind == TE_NAME && covers(t->loc, h->file, h->off))
    h->texpr = t;
  if (t->kind == TE_FN) {
    for (TypeExpr *p = t->arg; p; p = p->next)
      visit_texpr(h, p);
    visit_texpr(h, t->ret);
    return;
  }
  visit_texpr(h, t->arg);
  visit_texpr(h, t->arg2);
}

static void visit_list(Hit *h, Node *n) {
  for (; n; n = n->next)
    visit_node(h, n);
}

static void visit_node(Hit *h, Node *n) {
  if (!n)
    return;
  switch (n->kind) {
  case N_NAME:
    if (covers(n->loc, h->file, h->off))
      h->node = n;
    return;
  case N_FIELD: case N_STRUCT_LIT: case N_LAUNCH: case N_LET: case N_FOR: case N_COMPREH:
    if (covers(n->name_loc, h->file, h->off) && n->name_loc.len > 0)
      h->node = n;
    break;
  default:
    break;
  }
  if (n->kind == N_LET || n->kind == N_MAP_NEW || n->kind == N_CALL)
    visit_texpr(h, n->texpr); /* let x: T, map<K, V>(), f<T>(...) */
  visit_node(h, n->lhs);
  visit_node(h, n->rhs);
  visit_node(h, n->cond);
  visit_node(h, n->then);
  visit_node(h, n->els);
  if (n->kind == N_CALL) {
    /* The callee's name refers to the call's target. */
    Node *before = h->node;
    visit_node(h, n->callee);
    if (h->node != before && h->node && (h->node == n->callee ||
        (n->callee->kind == N_FIELD && h->node == n->callee)))
      h->node = n;
  }
  visit_list(h, n->args);
  if (n->kind == N_BLOCK)
    visit_list(h, n->body);
  else
    visit_node(h, n->body);
}

static void visit_decl(Hit *h, Decl *d) {
  if (covers(d->name_loc, h->file, h->off))
    h->decl = d;
  visit_texpr(h, d->texpr);
  visit_texpr(h, d->ret);
  for (Decl *p = d->params; p; p = p->next)
    visit_decl(h, p);
  for (Decl *f = d->fields; f; f = f->next)
    visit_decl(h, f);
  if (d->init)
    visit_decl(h, d->init);
  for (Decl *m = d->methods; m; m = m->next)
    visit_decl(h, m);
  visit_node(h, d->value);
  visit_node(h, d->body);
}

static Hit find_at(Analysis *a, int off) {
  Hit h = {.file = a->file, .off = off, .mod = a->prog.main};
  for (Decl *d = a->prog.main->decls; d; d = d->next)
    visit_decl(&h, d);
  return h;
}

/* Hover text of the data core's builtins and str/array methods: the
 * signature as docs/language.md gives it, since they have no declaration
 * to show.  NULL for the other builtins (their hover is the result type). */
static const char *data_core_doc(Node *call) {
  Type *r = call->recv ? call->recv->ty : NULL;
  const char *elem = r && r->kind == TY_ARRAY ? ty_str(r->elem) : "T";
  switch (call->builtin) {
  case B_SIN: case B_COS: case B_TAN: case B_CEIL: case B_ROUND:
    return arena_printf("builtin %s(x: %s) -> %s%s", call->callee->name, ty_str(call->ty),
                        ty_str(call->ty), call->builtin == B_ROUND ? " (half to even)" : "");
  case B_ATAN2: return arena_printf("builtin atan2(y: %s, x: %s) -> %s", ty_str(call->ty), ty_str(call->ty), ty_str(call->ty));
  case B_RAND_INT: return "builtin rand_int(lo: i64, hi: i64) -> i64 (in [lo, hi))";
  case B_RANDN_F32: return "builtin randn_f32() -> f32 (standard normal)";
  case B_SORT: return arena_printf("builtin sort(xs: %s) -> %s (a new ascending array; NaN last)",
                                   ty_str(call->ty), ty_str(call->ty));
  case B_ARGSORT: return "builtin argsort(xs: T[]) -> i64[] (stable)";
  case B_JOIN: return "builtin join(sep: str, parts: str[]) -> str";
  case B_STR_SPLIT: return "str.split(sep: str) -> str[]";
  case B_STR_SPLIT_WS: return "str.split() -> str[] (on runs of whitespace)";
  case B_STR_FIND: return "str.find(t: str) -> i64 (byte offset, or -1)";
  case B_STR_STRIP: return "str.strip() -> str";
  case B_STR_LOWER: return "str.lower() -> str (ASCII letters)";
  case B_STR_UPPER: return "str.upper() -> str (ASCII letters)";
  case B_STR_REPLACE: return "str.replace(from: str, to: str) -> str";
  case B_STR_STARTS_WITH: return "str.starts_with(t: str) -> bool";
  case B_STR_ENDS_WITH: return "str.ends_with(t: str) -> bool";
  case B_PUSH: return arena_printf("%s[].push(v: %s)", elem, elem);
  case B_POP: return arena_printf("%s[].pop() -> %s (removes the last)", elem, elem);
  default: return NULL;
  }
}

/* A tensor method call x.sum(1) as it is written: `tensor.sum(axis: i64)
 * -> tensor`, naming the std.nn function it calls (sema binds x as its
 * first parameter). */
static const char *tensor_method_doc(Decl *d) {
  Buf b = {0};
  buf_printf(&b, "tensor.%s(", d->name);
  for (Decl *p = d->params ? d->params->next : NULL; p; p = p->next)
    buf_printf(&b, "%s%s: %s", p == d->params->next ? "" : ", ", p->name, ty_str(p->type));
  buf_putc(&b, ')');
  if (d->ret_type && d->ret_type->kind != TY_VOID)
    buf_printf(&b, " -> %s", ty_str(d->ret_type));
  buf_printf(&b, " (std.nn's %s)", d->name);
  char *s = arena_strdup(b.data);
  buf_free(&b);
  return s;
}

/* The declaration a hit refers to, and where it was declared. */
static bool target_of(Hit *h, Loc *where, const char **what, Type **ty) {
  *ty = NULL;
  if (h->node) {
    Node *n = h->node;
    if (n->kind == N_CALL && n->decl) {
      *where = n->decl->name_loc;
      bool method = n->recv && n->recv->ty && n->recv->ty->kind == TY_TENSOR;
      *what = method ? tensor_method_doc(n->decl) : signature(n->decl);
      if (!method && n->decl->is_global && n->callee->kind == N_NAME)
        *what = arena_printf("%s (%s, @global)", *what, n->decl->module->name);
      return true;
    }
    if (n->kind == N_CALL && n->callkind == CALL_BUILTIN) {
      const char *doc = data_core_doc(n);
      *what = doc ? doc : arena_printf("builtin -> %s", ty_str(n->ty));
      where->file = -1;
      return true;
    }
    if ((n->kind == N_NAME || n->kind == N_LET || n->kind == N_FOR || n->kind == N_COMPREH) && n->var) {
      *where = n->var->loc;
      *ty = n->var->ty;
      *what = arena_printf("%s %s: %s", n->var->mutable ? "var" : "let", n->var->name, ty_str(n->var->ty));
      return true;
    }
    if (n->decl && (n->kind == N_NAME || n->kind == N_FIELD || n->kind == N_STRUCT_LIT || n->kind == N_LAUNCH)) {
      *where = n->decl->name_loc;
      *what = signature(n->decl);
      *ty = n->ty;
      return true;
    }
    if (n->ty) {
      *what = ty_str(n->ty);
      where->file = -1;
      return true;
    }
  }
  if (h->texpr) {
    Decl *d = NULL;
    for (Decl *x = h->mod->decls; x; x = x->next)
      if ((x->kind == D_STRUCT || x->kind == D_ACTOR) && !strcmp(x->name, h->texpr->name))
        d = x;
    if (d) {
      *where = d->name_loc;
      *what = arena_printf("%s %s", d->kind == D_STRUCT ? "struct" : "actor", d->name);
      return true;
    }
    *what = !h->texpr->module && !strcmp(h->texpr->name, "tensor")
                ? "tensor: an n-dimensional f32 array of std.nn, a reference"
                : h->texpr->name;
    where->file = -1;
    return true;
  }
  if (h->decl) {
    *where = h->decl->name_loc;
    *what = signature(h->decl);
    return true;
  }
  return false;
}

static int request_offset(Analysis *a, cJSON *params) {
  cJSON *pos = cJSON_GetObjectItem(params, "position");
  cJSON *line = cJSON_GetObjectItem(pos, "line"), *ch = cJSON_GetObjectItem(pos, "character");
  if (!cJSON_IsNumber(line) || !cJSON_IsNumber(ch))
    return -1;
  return offset_of(src_get(a->file), line->valueint, ch->valueint);
}

static cJSON *definition(Analysis *a, cJSON *params) {
  int off = request_offset(a, params);
  if (off < 0)
    return NULL;
  Hit h = find_at(a, off);
  Loc where = {0};
  const char *what;
  Type *ty;
  if (!target_of(&h, &where, &what, &ty) || where.file < 0)
    return NULL;
  Source *s = src_get(where.file);
  if (!s || !strncmp(s->path, "<std>", 5))
    return NULL;
  cJSON *loc = cJSON_CreateObject();
  cJSON_AddStringToObject(loc, "uri", path_to_uri(s->path));
  cJSON_AddItemToObject(loc, "range", range_of(where));
  return loc;
}

static cJSON *hover(Analysis *a, cJSON *params) {
  int off = request_offset(a, params);
  if (off < 0)
    return NULL;
  Hit h = find_at(a, off);
  Loc where;
  const char *what;
  Type *ty;
  if (!target_of(&h, &where, &what, &ty))
    return NULL;
  cJSON *r = cJSON_CreateObject();
  cJSON *c = cJSON_AddObjectToObject(r, "contents");
  cJSON_AddStringToObject(c, "kind", "markdown");
  cJSON_AddStringToObject(c, "value", arena_printf("```sflow\n%s\n```", what));
  return r;
}

/* ------------------------------------------------------------- dispatch */

static cJSON *capabilities(void) {
  cJSON *r = cJSON_CreateObject();
  cJSON *caps = cJSON_AddObjectToObject(r, "capabilities");
  cJSON *sync = cJSON_AddObjectToObject(caps, "textDocumentSync");
  cJSON_AddBoolToObject(sync, "openClose", 1);
  cJSON_AddNumberToObject(sync, "change", 1); /* full */
  cJSON_AddBoolToObject(caps, "documentSymbolProvider", 1);
  cJSON_AddBoolToObject(caps, "definitionProvider", 1);
  cJSON_AddBoolToObject(caps, "hoverProvider", 1);
  cJSON_AddStringToObject(caps, "positionEncoding", "utf-16");
  cJSON *info = cJSON_AddObjectToObject(r, "serverInfo");
  cJSON_AddStringToObject(info, "name", "sflowc");
  cJSON_AddStringToObject(info, "version", SFLOW_VERSION);
  return r;
}

static const char *str_at(cJSON *obj, const char *a, const char *b) {
  cJSON *x = cJSON_GetObjectItem(obj, a);
  if (b)
    x = cJSON_GetObjectItem(x, b);
  return cJSON_IsString(x) ? x->valuestring : NULL;
}

/* Returns false when the server should exit. */
static bool handle(cJSON *msg, int *exit_code) {
  cJSON *id = cJSON_GetObjectItem(msg, "id");
  const char *method = str_at(msg, "method", NULL);
  cJSON *params = cJSON_GetObjectItem(msg, "params");
  if (!method) {
    if (id)
      respond_error(id, -32600, "invalid request: no method");
    return true;
  }
  if (!strcmp(method, "initialize")) {
    respond(id, capabilities());
  } else if (!strcmp(method, "initialized") || !strcmp(method, "$/cancelRequest") ||
             !strcmp(method, "workspace/didChangeConfiguration") || !strcmp(method, "$/setTrace")) {
  } else if (!strcmp(method, "shutdown")) {
    shutting_down = true;
    respond(id, NULL);
  } else if (!strcmp(method, "exit")) {
    *exit_code = shutting_down ? 0 : 1;
    return false;
  } else if (!strcmp(method, "textDocument/didOpen") || !strcmp(method, "textDocument/didChange")) {
    const char *uri = str_at(params, "textDocument", "uri");
    const char *text = str_at(params, "textDocument", "text");
    if (!text) {
      cJSON *changes = cJSON_GetObjectItem(params, "contentChanges");
      cJSON *last = cJSON_GetArrayItem(changes, cJSON_GetArraySize(changes) - 1);
      text = str_at(last, "text", NULL);
    }
    if (uri && text) {
      doc_set(uri, text);
      publish(doc_find(uri));
    }
  } else if (!strcmp(method, "textDocument/didClose")) {
    const char *uri = str_at(params, "textDocument", "uri");
    if (uri)
      doc_close(uri);
  } else if (!strcmp(method, "textDocument/documentSymbol") || !strcmp(method, "textDocument/definition") ||
             !strcmp(method, "textDocument/hover")) {
    const char *uri = str_at(params, "textDocument", "uri");
    Doc *d = uri ? doc_find(uri) : NULL;
    if (!d) {
      respond_error(id, -32602, "unknown document (send textDocument/didOpen first)");
      return true;
    }
    Analysis a = analyze(d, NULL);
    cJSON *r = !strcmp(method, "textDocument/documentSymbol") ? document_symbols(&a)
             : !strcmp(method, "textDocument/definition") ? definition(&a, params)
             : hover(&a, params);
    respond(id, r);
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
