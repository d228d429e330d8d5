/*
 * lsp_find.c — the language server's answers about one position: what is
 * under the cursor (a walk of the checked AST), hover (the declaration as
 * written, its type, and its doc comment), go to definition (into the
 * program's files and, read-only, into the std modules embedded in sflowc)
 * and the outline of a document.
 *
 * Doc comments are the `//` lines directly above a declaration (above its
 * annotations), as the std modules write them, or else a `//` comment
 * after it on the same line (a struct field's note).
 */
#include "lsp.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* -------------------------------------------------------------- symbols */

enum { SK_CLASS = 5, SK_METHOD = 6, SK_FIELD = 8, SK_CONSTRUCTOR = 9, SK_FUNCTION = 12,
       SK_CONSTANT = 14, SK_STRUCT = 23, SK_MODULE = 2 };

static cJSON *symbol(const char *name, const char *detail, int kind, Loc whole, Loc sel) {
  cJSON *s = cJSON_CreateObject();
  cJSON_AddStringToObject(s, "name", name && *name ? name : "?");
  if (detail)
    cJSON_AddStringToObject(s, "detail", detail);
  cJSON_AddNumberToObject(s, "kind", kind);
  cJSON_AddItemToObject(s, "range", lsp_range(whole));
  cJSON_AddItemToObject(s, "selectionRange", lsp_range(sel));
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

/* A type as written: "f32[]", "map<str, i64>", "fn(f64) -> f64". */
static void texpr_put(Buf *b, TypeExpr *t) {
  if (!t) {
    buf_puts(b, "?");
    return;
  }
  switch (t->kind) {
  case TE_NAME:
    buf_printf(b, "%s%s%s", t->module ? t->module : "", t->module ? "." : "", t->name);
    break;
  case TE_ARRAY:
    texpr_put(b, t->arg);
    buf_puts(b, "[]");
    break;
  case TE_GENERIC:
    buf_printf(b, "%s<", t->name);
    texpr_put(b, t->arg);
    if (t->arg2) {
      buf_puts(b, ", ");
      texpr_put(b, t->arg2);
    }
    buf_putc(b, '>');
    break;
  case TE_FN:
    buf_puts(b, "fn(");
    for (TypeExpr *p = t->arg; p; p = p->next) {
      texpr_put(b, p);
      if (p->next)
        buf_puts(b, ", ");
    }
    buf_putc(b, ')');
    if (t->ret) {
      buf_puts(b, " -> ");
      texpr_put(b, t->ret);
    }
    break;
  }
}

/* The checked type when sema has run, else the type as written. */
static void type_put(Buf *b, Type *ty, TypeExpr *te) {
  if (ty && ty->kind != TY_ERROR)
    buf_puts(b, ty_str(ty));
  else
    texpr_put(b, te);
}

static void param_put(Buf *b, Decl *p) {
  buf_printf(b, "%s: ", p->name);
  type_put(b, p->type, p->texpr);
  if (p->value) {
    Source *s = src_get(p->value->loc.file);
    if (s && p->value->loc.len > 0 && p->value->loc.len < 40)
      buf_printf(b, " = %.*s", p->value->loc.len, s->text + p->value->loc.off);
  }
}

const char *lsp_signature(Decl *d) {
  Buf b = {0};
  static const char *kw[] = {"import", "const", "struct", "fn", "kernel", "task", "actor",
                             "workflow", "var", "param", "init", "fn"};
  buf_printf(&b, "%s %s", kw[d->kind], d->kind == D_INIT ? "init" : d->name);
  if (d->kind == D_FN || d->kind == D_TASK || d->kind == D_KERNEL || d->kind == D_WORKFLOW ||
      d->kind == D_METHOD || d->kind == D_INIT) {
    buf_putc(&b, '(');
    for (Decl *p = d->params; p; p = p->next) {
      if (p != d->params)
        buf_puts(&b, ", ");
      param_put(&b, p);
    }
    buf_putc(&b, ')');
    if (d->ret_type ? d->ret_type->kind != TY_VOID : d->ret != NULL) {
      buf_puts(&b, " -> ");
      type_put(&b, d->ret_type, d->ret);
    }
  } else if (d->kind == D_PARAM) {
    b.len = 0;
    buf_puts(&b, "param ");
    param_put(&b, d);
  } else if (d->kind == D_FIELD && d->parent && d->parent->kind == D_STRUCT) {
    b.len = 0;
    buf_printf(&b, "%s.%s: ", d->parent->name, d->name); /* a struct's field: Point.x: f64 */
    type_put(&b, d->type, d->texpr);
  } else if (d->kind == D_CONST || d->kind == D_FIELD) {
    buf_puts(&b, ": ");
    type_put(&b, d->type, d->texpr);
  }
  char *s = arena_strdup(b.data);
  buf_free(&b);
  return s;
}

cJSON *lsp_document_symbols(Analysis *a) {
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
    cJSON *s = symbol(d->kind == D_IMPORT ? d->path : d->name, lsp_signature(d), kind, decl_extent(d), d->name_loc);
    if (d->kind == D_STRUCT || d->kind == D_ACTOR) {
      cJSON *kids = cJSON_AddArrayToObject(s, "children");
      for (Decl *f = d->fields; f; f = f->next)
        cJSON_AddItemToArray(kids, symbol(f->name, lsp_signature(f), SK_FIELD, f->loc, f->name_loc));
      if (d->init)
        cJSON_AddItemToArray(kids, symbol("init", lsp_signature(d->init), SK_CONSTRUCTOR, decl_extent(d->init), d->init->name_loc));
      for (Decl *m = d->methods; m; m = m->next)
        cJSON_AddItemToArray(kids, symbol(m->name, lsp_signature(m), SK_METHOD, decl_extent(m), m->name_loc));
    }
    cJSON_AddItemToArray(out, s);
  }
  return out;
}

/* ------------------------------------------------- finding what is under */


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
  if (n->kind == N_STRUCT_LIT)
    for (Node *f = n->args; f; f = f->next)
      if (f->kind == N_FIELD_INIT && covers(f->name_loc, h->file, h->off)) {
        h->node = f;
        h->call = n;
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
    if (h->node != before && h->node && h->node == n->callee) {
      h->node = n;
      h->call = n;
    }
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

Hit lsp_find_at(Analysis *a, int off) {
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
  case B_ORD: return "builtin ord(c: str) -> i64 (the code point of one character)";
  case B_CHR: return "builtin chr(cp: i64) -> str (the character, UTF-8)";
  case B_STR_CODEPOINTS: return "str.codepoints() -> i64[] (one per character)";
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

/* The struct or actor a type name names, in the module the hit is in or
 * the module it is qualified with. */
static Decl *type_decl(Analysis *a, Hit *h, TypeExpr *t) {
  Module *m = h->mod;
  if (t->module)
    m = lsp_module_of_alias(&a->prog, h->mod, t->module);
  for (Decl *x = m ? m->decls : NULL; x; x = x->next)
    if ((x->kind == D_STRUCT || x->kind == D_ACTOR) && !strcmp(x->name, t->name))
      return x;
  return NULL;
}

Module *lsp_module_of_alias(Program *p, Module *m, const char *alias) {
  for (Decl *d = m ? m->decls : NULL; d; d = d->next)
    if (d->kind == D_IMPORT && d->name && !strcmp(d->name, alias)) {
      if (d->llvm2)
        return d->llvm2; /* sema's link from the import to the module */
      for (Module *x = p->modules; x; x = x->next)
        if (!strcmp(x->name, d->path))
          return x;
    }
  return NULL;
}

/* The field a `name: value` of a struct literal sets. */
static Decl *field_of_init(Node *lit, Node *init) {
  for (Decl *f = lit && lit->decl ? lit->decl->fields : NULL; f; f = f->next)
    if (!strcmp(f->name, init->name))
      return f;
  return NULL;
}

bool lsp_target(Analysis *a, Hit *h, Decl **decl, Var **var) {
  *decl = NULL;
  *var = NULL;
  Node *n = h->node;
  if (n && n->kind == N_FIELD_INIT) {
    *decl = field_of_init(h->call, n);
  } else if (n && n->kind == N_CALL) {
    *decl = n->decl;
  } else if (n && n->var) {
    if (n->var->decl)
      *decl = n->var->decl;
    else
      *var = n->var;
  } else if (n && n->decl) {
    *decl = n->decl;
  } else if (!n && h->texpr) {
    *decl = type_decl(a, h, h->texpr);
  } else if (!n && h->decl) {
    *decl = h->decl;
  }
  return *decl || *var;
}

/* What hover shows for a hit, where its declaration is, and the
 * declaration whose doc comment goes with it. */
static bool target_of(Analysis *a, Hit *h, Loc *where, const char **what, Decl **doc) {
  *doc = NULL;
  if (h->node) {
    Node *n = h->node;
    if (n->kind == N_FIELD_INIT) {
      Decl *f = field_of_init(h->call, n);
      if (!f)
        return false;
      *where = f->name_loc;
      *what = lsp_signature(f);
      *doc = f;
      return true;
    }
    if (n->kind == N_CALL && n->decl) {
      *where = n->decl->name_loc;
      *doc = n->decl;
      bool method = n->recv && n->recv->ty && n->recv->ty->kind == TY_TENSOR;
      *what = method ? tensor_method_doc(n->decl) : lsp_signature(n->decl);
      if (!method && n->decl->is_global && n->callee->kind == N_NAME)
        *what = arena_printf("%s (%s, @global)", *what, n->decl->module->name);
      return true;
    }
    if (n->kind == N_CALL && n->callkind == CALL_BUILTIN) {
      const char *d = data_core_doc(n);
      *what = d ? d : arena_printf("builtin -> %s", ty_str(n->ty));
      where->file = -1;
      return true;
    }
    if ((n->kind == N_NAME || n->kind == N_LET || n->kind == N_FOR || n->kind == N_COMPREH) && n->var) {
      *where = n->var->loc;
      *doc = n->var->decl;
      *what = arena_printf("%s %s: %s", n->var->mutable ? "var" : "let", n->var->name, ty_str(n->var->ty));
      return true;
    }
    if (n->decl && (n->kind == N_NAME || n->kind == N_FIELD || n->kind == N_STRUCT_LIT || n->kind == N_LAUNCH)) {
      *where = n->decl->name_loc;
      *what = lsp_signature(n->decl);
      *doc = n->decl;
      return true;
    }
    if (n->ty) {
      *what = ty_str(n->ty);
      where->file = -1;
      return true;
    }
  }
  if (h->texpr) {
    Decl *d = type_decl(a, h, h->texpr);
    if (d) {
      *where = d->name_loc;
      *what = arena_printf("%s %s", d->kind == D_STRUCT ? "struct" : "actor", d->name);
      *doc = d;
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
    *what = lsp_signature(h->decl);
    *doc = h->decl;
    return true;
  }
  return false;
}

int lsp_request_offset(Analysis *a, cJSON *params) {
  cJSON *pos = cJSON_GetObjectItem(params, "position");
  cJSON *line = cJSON_GetObjectItem(pos, "line"), *ch = cJSON_GetObjectItem(pos, "character");
  if (!cJSON_IsNumber(line) || !cJSON_IsNumber(ch))
    return -1;
  return lsp_offset_of(src_get(a->file), line->valueint, ch->valueint);
}

/* ---------------------------------------------------------- doc comments */

/* The text of a `//` comment line (s points at the slashes), trimmed. */
static void comment_put(Buf *b, const char *s, const char *end) {
  s += 2;
  if (s < end && *s == '/')
    s++; /* `///` reads as `//` */
  if (s < end && *s == ' ')
    s++;
  while (end > s && (end[-1] == ' ' || end[-1] == '\r' || end[-1] == '\t'))
    end--;
  buf_putn(b, s, (size_t)(end - s));
}

const char *lsp_doc_comment(Decl *d) {
  Loc at = d->annots && d->annots->loc.off < d->loc.off ? d->annots->loc : d->loc;
  if (d->kind == D_PARAM || d->kind == D_IMPORT)
    return NULL;
  Source *s = src_get(at.file);
  if (!s)
    return NULL;
  const char *t = s->text;
  int ls = at.off; /* start of the declaration's line */
  while (ls > 0 && t[ls - 1] != '\n')
    ls--;
  /* Walk up over the lines directly above that hold only a // comment. */
  int first = ls, p = ls;
  while (p > 0) {
    int e = p - 1, b = e; /* e: the newline ending the line above */
    while (b > 0 && t[b - 1] != '\n')
      b--;
    int i = b;
    while (i < e && (t[i] == ' ' || t[i] == '\t'))
      i++;
    if (i + 1 >= e || t[i] != '/' || t[i + 1] != '/')
      break;
    first = b;
    p = b;
  }
  Buf b = {0};
  for (int q = first; q < ls;) {
    int e = q;
    while (t[e] != '\n')
      e++;
    int i = q;
    while (t[i] == ' ' || t[i] == '\t')
      i++;
    if (b.len)
      buf_putc(&b, '\n');
    comment_put(&b, t + i, t + e);
    q = e + 1;
  }
  if (!b.len) {
    /* A note after the declaration on its own line: `x: f64 // metres`. */
    int e = d->name_loc.off;
    while ((size_t)e < s->len && t[e] != '\n')
      e++;
    for (int i = d->name_loc.off; i + 1 < e; i++) {
      if (t[i] == '"')
        break; /* a string: not worth telling a // inside it apart */
      if (t[i] == '/' && t[i + 1] == '/') {
        comment_put(&b, t + i, t + e);
        break;
      }
    }
  }
  char *r = b.len ? arena_strdup(b.data) : NULL;
  buf_free(&b);
  return r;
}

/* --------------------------------------------------- std modules on disk */

static const char *std_dir(void) {
  const char *xdg = getenv("XDG_CACHE_HOME");
  const char *home = getenv("HOME");
  if (xdg && *xdg)
    return arena_printf("%s/sflow/std/%s", xdg, SFLOW_VERSION);
  return arena_printf("%s/.cache/sflow/std/%s", home && *home ? home : "/tmp", SFLOW_VERSION);
}

static bool mkdirs(const char *path) {
  char *p = arena_strdup(path);
  for (char *q = p + 1; *q; q++)
    if (*q == '/') {
      *q = 0;
      if (mkdir(p, 0755) && errno != EEXIST)
        return false;
      *q = '/';
    }
  return !mkdir(p, 0755) || errno == EEXIST;
}

/* Writes the embedded source of std.NAME once (again when it differs, as
 * after an upgrade of sflowc with the same version), mode 0444 so that an
 * editor opens it read-only; its path, or NULL when it cannot be written. */
const char *lsp_std_file(const char *name) {
  size_t len;
  const char *text = stdlib_lookup(name, &len);
  if (!text)
    return NULL;
  const char *dir = std_dir();
  const char *path = arena_printf("%s/%s.sflow", dir, name);
  char why[64];
  size_t have_len;
  char *have = read_file(path, &have_len, why, sizeof why);
  bool same = have && have_len == len && !memcmp(have, text, len);
  free(have);
  if (same)
    return path;
  if (!mkdirs(dir))
    return NULL;
  const char *tmp = arena_printf("%s.%d.tmp", path, (int)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f)
    return NULL;
  bool ok = fwrite(text, 1, len, f) == len;
  ok = !fclose(f) && ok;
  if (!ok || chmod(tmp, 0444) || rename(tmp, path)) {
    unlink(tmp);
    return NULL;
  }
  return path;
}

bool lsp_is_std_copy(const char *path) {
  const char *dir = std_dir();
  size_t n = strlen(dir);
  return !strncmp(path, dir, n) && path[n] == '/';
}

const char *lsp_source_path(Source *s) {
  if (!s)
    return NULL;
  if (!strncmp(s->path, "<std>/", 6)) {
    const char *name = arena_strndup(s->path + 6, strlen(s->path + 6) - 6); /* drop .sflow */
    return lsp_std_file(name);
  }
  return s->path;
}

/* -------------------------------------------------------- hover, definition */

cJSON *lsp_definition(Analysis *a, cJSON *params) {
  int off = lsp_request_offset(a, params);
  if (off < 0)
    return NULL;
  Hit h = lsp_find_at(a, off);
  Loc where = {0};
  const char *what;
  Decl *doc;
  if (!target_of(a, &h, &where, &what, &doc) || where.file < 0)
    return NULL;
  const char *path = lsp_source_path(src_get(where.file));
  if (!path)
    return NULL;
  cJSON *loc = cJSON_CreateObject();
  cJSON_AddStringToObject(loc, "uri", lsp_path_to_uri(path));
  cJSON_AddItemToObject(loc, "range", lsp_range(where));
  return loc;
}

cJSON *lsp_hover(Analysis *a, cJSON *params) {
  int off = lsp_request_offset(a, params);
  if (off < 0)
    return NULL;
  Hit h = lsp_find_at(a, off);
  Loc where;
  const char *what;
  Decl *doc;
  if (!target_of(a, &h, &where, &what, &doc))
    return NULL;
  const char *text = doc ? lsp_doc_comment(doc) : NULL;
  cJSON *r = cJSON_CreateObject();
  cJSON *c = cJSON_AddObjectToObject(r, "contents");
  cJSON_AddStringToObject(c, "kind", "markdown");
  cJSON_AddStringToObject(c, "value", text ? arena_printf("```sflow\n%s\n```\n\n%s", what, text)
                                           : arena_printf("```sflow\n%s\n```", what));
  return r;
}
