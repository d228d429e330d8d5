/*
 * lsp_complete.c — completion and signature help.
 *
 * The text right before the cursor says what is wanted: `@` an annotation,
 * `expr.` a member, `callee(` ... the signature of a call, anything else
 * a name in scope.  The document being typed rarely parses, so the front
 * end runs on a patched copy: the half-typed word becomes a placeholder
 * name (`nn.Li` -> `nn.__sflow_complete`), and if that still does not
 * parse, the cursor's line is blanked.  Sema keeps going after the
 * placeholder's "no such name", so the receiver's type and every local
 * declared before the cursor are there to answer from.  When nothing
 * parses at all, the imports are still read from the text, so `nn.` lists
 * std.nn.
 */
#include "lsp.h"

#include <stdlib.h>
#include <string.h>

#define PLACEHOLDER "__sflow_complete"

/* CompletionItemKind and the like, from the protocol. */
enum { CK_METHOD = 2, CK_FUNCTION = 3, CK_CONSTRUCTOR = 4, CK_FIELD = 5, CK_VARIABLE = 6,
       CK_CLASS = 7, CK_MODULE = 9, CK_KEYWORD = 14, CK_CONSTANT = 21, CK_STRUCT = 22,
       CK_EVENT = 23, CK_TYPE = 25 };

static bool ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* The cursor as a byte offset in doc's text. */
static int cursor_of(Doc *doc, cJSON *params) {
  cJSON *pos = cJSON_GetObjectItem(params, "position");
  cJSON *line = cJSON_GetObjectItem(pos, "line"), *ch = cJSON_GetObjectItem(pos, "character");
  if (!cJSON_IsNumber(line) || !cJSON_IsNumber(ch))
    return -1;
  Source s = {.path = doc->uri, .text = doc->text, .len = doc->len};
  return lsp_offset_of(&s, line->valueint, ch->valueint);
}

/* Is off inside a string or a // comment of its line?  (A rough look at
 * the line: block comments across lines are not seen.) */
static bool in_string_or_comment(const char *t, int off) {
  int i = off;
  while (i > 0 && t[i - 1] != '\n')
    i--;
  bool str = false;
  for (; i < off; i++) {
    if (str && t[i] == '\\')
      i++;
    else if (t[i] == '"')
      str = !str;
    else if (!str && t[i] == '/' && t[i + 1] == '/')
      return true;
  }
  return str;
}

/* ------------------------------------------------------ patched analysis */

/* Analyses doc with [from, to) replaced by repl; if that has a syntax
 * error, with the cursor's line blanked instead (offsets before the line
 * stay put).  *patched_ok: the first try parsed. */
static Analysis analyze_patched(Doc *doc, int from, int to, const char *repl, bool *patched_ok) {
  const char *path = lsp_uri_to_path(doc->uri);
  char *keep = strdup(path);
  size_t rl = strlen(repl);
  char *t = malloc(doc->len + rl + 1);
  memcpy(t, doc->text, (size_t)from);
  memcpy(t + from, repl, rl);
  memcpy(t + from + rl, doc->text + to, doc->len - (size_t)to);
  size_t n = doc->len - (size_t)(to - from) + rl;
  t[n] = 0;
  Analysis a = lsp_analyze_text(keep, t, n, NULL);
  *patched_ok = a.parsed;
  if (!a.parsed) {
    memcpy(t, doc->text, doc->len + 1);
    for (int i = from; i > 0 && t[i - 1] != '\n'; i--)
      t[i - 1] = ' ';
    for (size_t i = (size_t)from; i < doc->len && t[i] != '\n'; i++)
      t[i] = ' ';
    a = lsp_analyze_text(keep, t, doc->len, NULL);
  }
  free(t);
  free(keep);
  return a;
}

/* -------------------------------------------------------------- scopes */

typedef struct {
  int off;
  const char *name; /* looking for this one, or NULL to collect all */
  Var *found;
  Var *vars[512];
  int nvars;
} Scope;

static void scope_add(Scope *sc, Var *v) {
  if (!v || !v->name)
    return;
  if (sc->name && !strcmp(sc->name, v->name))
    sc->found = v; /* the latest declaration before the cursor wins */
  if (sc->nvars < (int)(sizeof sc->vars / sizeof *sc->vars))
    sc->vars[sc->nvars++] = v;
}

static bool before(Loc l, int off) { return l.off < off; }
static bool around(Loc l, int off) { return l.off <= off && off <= l.off + l.len; }

/* Variables declared before off in the blocks that hold off. */
static void scope_walk(Scope *sc, Node *n) {
  for (; n; n = n->next) {
    if (!before(n->loc, sc->off))
      return;
    if (n->kind == N_LET && n->var && n->name_loc.off < sc->off)
      scope_add(sc, n->var);
    if (!around(n->loc, sc->off))
      continue;
    if ((n->kind == N_FOR || n->kind == N_COMPREH) && n->var)
      scope_add(sc, n->var);
    if (n->kind == N_BLOCK)
      scope_walk(sc, n->body);
    else {
      Node *kids[] = {n->then, n->els, n->body, n->lhs, n->rhs, n->cond};
      for (size_t i = 0; i < sizeof kids / sizeof *kids; i++)
        if (kids[i] && (kids[i]->kind == N_BLOCK || kids[i]->kind == N_IF || kids[i]->kind == N_FOR ||
                        kids[i]->kind == N_WHILE || kids[i]->kind == N_COMPREH)) {
          Node *one = kids[i]->next;
          kids[i]->next = NULL; /* a single child, not the list it sits in */
          scope_walk(sc, kids[i]);
          kids[i]->next = one;
        }
    }
  }
}

/* The item (or actor member) that holds off, if any. */
static Decl *enclosing(Module *m, int off, Decl **actor) {
  *actor = NULL;
  for (Decl *d = m ? m->decls : NULL; d; d = d->next) {
    Loc end = d->body ? d->body->loc : d->end_loc;
    if (off < d->loc.off || off > end.off + end.len)
      continue;
    if (d->kind == D_ACTOR) {
      *actor = d;
      if (d->init && d->init->body && around(d->init->body->loc, off))
        return d->init;
      for (Decl *x = d->methods; x; x = x->next)
        if (x->body && around(x->body->loc, off))
          return x;
      return d;
    }
    return d;
  }
  return NULL;
}

static void scope_collect(Analysis *a, int off, Scope *sc, Decl **fn, Decl **actor) {
  sc->off = off;
  *fn = enclosing(a->prog.main, off, actor);
  if (!*fn)
    return;
  for (Decl *p = (*fn)->params; p; p = p->next)
    if (p->var)
      scope_add(sc, p->var);
  if ((*fn)->body)
    scope_walk(sc, (*fn)->body);
}

/* --------------------------------------------------------------- items */

static bool wanted(const char *label, const char *prefix) {
  return label && strncmp(label, PLACEHOLDER, 8) && !strncmp(label, prefix, strlen(prefix)) &&
         strncmp(label, "__", 2);
}

static void item(cJSON *items, const char *prefix, const char *label, int kind, const char *detail,
                 const char *doc) {
  if (!wanted(label, prefix))
    return;
  cJSON *it;
  cJSON_ArrayForEach(it, items) {
    if (!strcmp(lsp_str_at(it, "label", NULL), label))
      return; /* overloads and shadowed names: the first one stands */
  }
  it = cJSON_CreateObject();
  cJSON_AddStringToObject(it, "label", label);
  cJSON_AddNumberToObject(it, "kind", kind);
  if (detail)
    cJSON_AddStringToObject(it, "detail", detail);
  if (doc) {
    cJSON *d = cJSON_AddObjectToObject(it, "documentation");
    cJSON_AddStringToObject(d, "kind", "markdown");
    cJSON_AddStringToObject(d, "value", doc);
  }
  cJSON_AddItemToArray(items, it);
}

static int decl_kind(Decl *d) {
  switch (d->kind) {
  case D_IMPORT: return CK_MODULE;
  case D_CONST: return CK_CONSTANT;
  case D_STRUCT: return CK_STRUCT;
  case D_ACTOR: return CK_CLASS;
  case D_FIELD: return CK_FIELD;
  case D_METHOD: return CK_METHOD;
  case D_INIT: return CK_CONSTRUCTOR;
  case D_PARAM: return CK_VARIABLE;
  default: return CK_FUNCTION;
  }
}

static void decl_item(cJSON *items, const char *prefix, Decl *d) {
  if (d->kind == D_IMPORT) {
    item(items, prefix, d->name, CK_MODULE, arena_printf("import %s", d->path), NULL);
    return;
  }
  const char *sig = lsp_signature(d);
  int more = 0;
  for (Decl *o = d->overload; o; o = o->overload)
    more++;
  if (more)
    sig = arena_printf("%s (+%d overload%s)", sig, more, more > 1 ? "s" : "");
  item(items, prefix, d->name, decl_kind(d), sig, lsp_doc_comment(d));
}

static void var_item(cJSON *items, const char *prefix, Var *v) {
  if (v->decl) {
    decl_item(items, prefix, v->decl);
    return;
  }
  item(items, prefix, v->name, CK_VARIABLE,
       arena_printf("%s %s: %s", v->mutable ? "var" : "let", v->name, v->ty ? ty_str(v->ty) : "?"), NULL);
}

/* The module an import in the main file names, even when sema did not
 * run: a std module's embedded source or a file next to the document is
 * parsed on the spot. */
static Module *module_for(Analysis *a, const char *alias) {
  Module *m = lsp_module_of_alias(&a->prog, a->prog.main, alias);
  if (m)
    return m;
  for (Decl *d = a->prog.main ? a->prog.main->decls : NULL; d; d = d->next) {
    if (d->kind != D_IMPORT || strcmp(d->name, alias))
      continue;
    size_t len;
    char why[64];
    char *heap = NULL;
    const char *text, *path;
    if (!strncmp(d->path, "std.", 4)) {
      text = stdlib_lookup(d->path + 4, &len);
      path = arena_printf("<std>/%s.sflow", d->path + 4);
    } else {
      const char *main = src_get(a->file)->path, *slash = strrchr(main, '/');
      path = arena_printf("%.*s%s.sflow", slash ? (int)(slash - main + 1) : 0, main, d->path);
      text = heap = read_file(path, &len, why, sizeof why);
    }
    if (!text)
      return NULL;
    diag_set_sink(NULL, NULL);
    int file = src_add(path, text, len, d->path);
    free(heap);
    m = parse_source(file);
    m->name = d->path;
    return m;
  }
  return NULL;
}

static Module *std_nn(Analysis *a) {
  for (Module *m = a->prog.modules; m; m = m->next)
    if (!strcmp(m->name, "std.nn"))
      return m;
  return NULL;
}

static void module_members(cJSON *items, const char *prefix, Module *m) {
  for (Decl *d = m ? m->decls : NULL; d; d = d->next)
    if (d->kind != D_IMPORT)
      decl_item(items, prefix, d);
}

/* The methods of the data core's types, as docs/language.md lists them. */
static void builtin_methods(cJSON *items, const char *prefix, Type *t) {
  static const char *const str_m[][2] = {
      {"split", "str.split(sep: str) -> str[] (no argument: on runs of whitespace)"},
      {"find", "str.find(t: str) -> i64 (byte offset, or -1)"},
      {"strip", "str.strip() -> str"},
      {"lower", "str.lower() -> str (ASCII letters)"},
      {"upper", "str.upper() -> str (ASCII letters)"},
      {"replace", "str.replace(from: str, to: str) -> str"},
      {"starts_with", "str.starts_with(t: str) -> bool"},
      {"ends_with", "str.ends_with(t: str) -> bool"},
      {"codepoints", "str.codepoints() -> i64[] (one per character)"}};
  static const char *const map_m[][2] = {
      {"get", "get(k: K) -> V (an error when k is missing)"}, {"has", "has(k: K) -> bool"},
      {"remove", "remove(k: K)"}, {"keys", "keys() -> K[] (in insertion order)"},
      {"values", "values() -> V[]"}};
  if (t->kind == TY_STR)
    for (size_t i = 0; i < sizeof str_m / sizeof *str_m; i++)
      item(items, prefix, str_m[i][0], CK_METHOD, str_m[i][1], NULL);
  if (t->kind == TY_MAP)
    for (size_t i = 0; i < sizeof map_m / sizeof *map_m; i++)
      item(items, prefix, map_m[i][0], CK_METHOD, map_m[i][1], NULL);
  if (t->kind == TY_ARRAY) {
    const char *e = ty_str(t->elem);
    item(items, prefix, "push", CK_METHOD, arena_printf("%s[].push(v: %s)", e, e), NULL);
    item(items, prefix, "pop", CK_METHOD, arena_printf("%s[].pop() -> %s (removes the last)", e, e), NULL);
    item(items, prefix, "split", CK_METHOD, arena_printf("%s[].split(k: i64) -> %s[][] (k near-equal parts)", e, e),
         NULL);
  }
  if (t->kind == TY_GROUP) {
    item(items, prefix, "all", CK_FIELD, "g.all.m(...) -> future<T[]>: every member", NULL);
    item(items, prefix, "any", CK_FIELD, "g.any.m(...) -> future<T>: the first member free", NULL);
  }
}

/* Members of a value of type t. */
static void type_members(cJSON *items, const char *prefix, Analysis *a, Type *t) {
  if (!t)
    return;
  if (t->kind == TY_STRUCT && t->decl)
    for (Decl *f = t->decl->fields; f; f = f->next)
      decl_item(items, prefix, f);
  if ((t->kind == TY_ACTOR || t->kind == TY_GROUP) && t->decl)
    for (Decl *m = t->decl->methods; m; m = m->next)
      decl_item(items, prefix, m);
  if (t->kind == TY_TENSOR) {
    /* std.nn's functions of a tensor are its methods: x.sum(1). */
    Module *nn = std_nn(a);
    for (Decl *d = nn ? nn->decls : NULL; d; d = d->next)
      if (d->kind == D_FN && d->params && d->params->type && d->params->type->kind == TY_TENSOR)
        decl_item(items, prefix, d);
  }
  builtin_methods(items, prefix, t);
}

/* The N_FIELD with the placeholder as its name. */
static Node *find_placeholder(Node *n, int off) {
  for (; n; n = n->next) {
    if (n->kind == N_FIELD && n->name && !strcmp(n->name, PLACEHOLDER) && n->name_loc.off == off)
      return n;
    Node *kids[] = {n->lhs, n->rhs, n->cond, n->then, n->els, n->body, n->args, n->callee};
    for (size_t i = 0; i < sizeof kids / sizeof *kids; i++) {
      if (!kids[i])
        continue;
      Node *one = kids[i]->next;
      bool list = kids[i] == n->args || (n->kind == N_BLOCK && kids[i] == n->body);
      if (!list)
        kids[i]->next = NULL;
      Node *r = find_placeholder(kids[i], off);
      if (!list)
        kids[i]->next = one;
      if (r)
        return r;
    }
  }
  return NULL;
}

static Node *placeholder_in(Module *m, int off) {
  for (Decl *d = m ? m->decls : NULL; d; d = d->next) {
    Node *r = find_placeholder(d->body, off);
    for (Decl *x = d->methods; !r && x; x = x->next)
      r = find_placeholder(x->body, off);
    if (!r && d->init)
      r = find_placeholder(d->init->body, off);
    if (r)
      return r;
  }
  return NULL;
}

static void annotations(cJSON *items, const char *prefix) {
  static const char *const an[][2] = {
      {"retry", "@retry(n): re-run a failed task up to n more times before await raises"},
      {"gpus", "@gpus(x): the GPUs a task or actor needs (fractions share one, e.g. 0.25)"},
      {"cpus", "@cpus(n): the CPU cores a task or actor needs"},
      {"timeout", "@timeout(seconds): fail the task when it runs longer"},
      {"restarts", "@restarts(n): restart a failed actor up to n times"},
      {"checkpoint", "@checkpoint(every = k, keep = n): save an actor's state every k calls"},
      {"replicas", "@replicas(n): the default group size of spawn for this actor"},
      {"global", "@global: a std function also visible unqualified and as a method"},
      {"extern", "@extern: a std function with no body, implemented in the runtime"}};
  for (size_t i = 0; i < sizeof an / sizeof *an; i++)
    item(items, prefix, an[i][0], CK_EVENT, an[i][1], NULL);
}

static void scope_items(cJSON *items, const char *prefix, Analysis *a, int off) {
  Scope sc = {0};
  Decl *fn, *actor;
  scope_collect(a, off, &sc, &fn, &actor);
  for (int i = sc.nvars - 1; i >= 0; i--) /* innermost, latest first */
    var_item(items, prefix, sc.vars[i]);
  if (actor) {
    for (Decl *f = actor->fields; f; f = f->next)
      decl_item(items, prefix, f);
    for (Decl *m = actor->methods; m; m = m->next)
      decl_item(items, prefix, m);
  }
  for (Decl *d = a->prog.main ? a->prog.main->decls : NULL; d; d = d->next)
    decl_item(items, prefix, d);
  /* The @global functions of every module the file imports. */
  for (Decl *d = a->prog.main ? a->prog.main->decls : NULL; d; d = d->next)
    if (d->kind == D_IMPORT) {
      Module *m = module_for(a, d->name);
      for (Decl *g = m ? m->decls : NULL; g; g = g->next)
        if (g->kind == D_FN && g->is_global)
          decl_item(items, prefix, g);
    }
  for (int i = 0; i < sflow_nbuiltin_names; i++)
    item(items, prefix, sflow_builtin_names[i], CK_FUNCTION, "builtin", NULL);
  for (int i = 0; i < sflow_ntype_names; i++)
    item(items, prefix, sflow_type_names[i], CK_TYPE, "type", NULL);
  for (int i = 0; i < sflow_nkeywords; i++)
    item(items, prefix, sflow_keywords[i], CK_KEYWORD, NULL, NULL);
}

/* The members of the receiver before the '.' at dot: from the patched
 * analysis's types when it parsed, else from the name alone. */
static void member_items(cJSON *items, const char *prefix, Analysis *a, Doc *doc, int dot, bool patched) {
  Node *f = patched ? placeholder_in(a->prog.main, dot + 1) : NULL;
  if (f && f->lhs && f->lhs->ty && f->lhs->ty->kind != TY_MODULE && f->lhs->ty->kind != TY_ERROR) {
    type_members(items, prefix, a, f->lhs->ty);
    return;
  }
  int s = dot;
  while (s > 0 && ident_char(doc->text[s - 1]))
    s--;
  if (s == dot)
    return;
  const char *name = arena_strndup(doc->text + s, (size_t)(dot - s));
  Scope sc = {.name = name};
  Decl *fn, *actor;
  scope_collect(a, s, &sc, &fn, &actor);
  if (sc.found) {
    type_members(items, prefix, a, sc.found->ty);
    return;
  }
  module_members(items, prefix, module_for(a, name));
}

cJSON *lsp_completion(Doc *doc, cJSON *params) {
  cJSON *list = cJSON_CreateObject();
  cJSON_AddBoolToObject(list, "isIncomplete", 0);
  cJSON *items = cJSON_AddArrayToObject(list, "items");
  int off = cursor_of(doc, params);
  if (off < 0 || in_string_or_comment(doc->text, off))
    return list;
  int ps = off;
  while (ps > 0 && ident_char(doc->text[ps - 1]))
    ps--;
  char *prefix = strndup(doc->text + ps, (size_t)(off - ps));
  char before = ps > 0 ? doc->text[ps - 1] : 0;
  int e = off;
  while ((size_t)e < doc->len && ident_char(doc->text[e]))
    e++; /* the rest of the word the cursor is in goes too */
  if (before == '@') {
    annotations(items, prefix);
  } else {
    bool patched;
    Analysis a = analyze_patched(doc, ps, e, PLACEHOLDER, &patched);
    if (before == '.' && !(ps >= 2 && doc->text[ps - 2] == '.'))
      member_items(items, prefix, &a, doc, ps - 1, patched);
    else
      scope_items(items, prefix, &a, ps);
  }
  free(prefix);
  return list;
}

/* ------------------------------------------------------- signature help */

/* The call the cursor is in: the offset of its '(', which argument
 * (commas at its depth) and the name of a named argument being typed. */
static int open_call(const char *t, int off, int *argi, const char **argname) {
  int depth = 0, commas = 0, seg = off;
  for (int i = off - 1; i >= 0; i--) {
    char c = t[i];
    if (c == '\n' && depth == 0 && i > 0 && t[i - 1] == '\n')
      return -1; /* a blank line: not inside a call */
    if (c == ')' || c == ']' || c == '}')
      depth++;
    else if (c == '(' || c == '[' || c == '{') {
      if (depth == 0) {
        if (c != '(')
          return -1;
        *argi = commas;
        /* `name = ` at the start of the current argument */
        int s = seg == off ? i + 1 : seg;
        while (t[s] == ' ' || t[s] == '\n' || t[s] == '\t')
          s++;
        int n = s;
        while (ident_char(t[n]))
          n++;
        int q = n;
        while (t[q] == ' ')
          q++;
        *argname = n > s && q < off && t[q] == '=' && t[q + 1] != '=' ? arena_strndup(t + s, (size_t)(n - s)) : NULL;
        return i;
      }
      depth--;
    } else if (c == ',' && depth == 0) {
      if (!commas)
        seg = i + 1;
      commas++;
    } else if (c == '"') {
      /* skip back over a string on this line */
      for (i--; i > 0 && !(t[i] == '"' && t[i - 1] != '\\') && t[i] != '\n'; i--)
        ;
    }
  }
  return -1;
}

static cJSON *signature_info(Decl *d, bool as_method, int argi, const char *argname, int *active) {
  Buf b = {0};
  cJSON *si = cJSON_CreateObject();
  cJSON *ps = cJSON_CreateArray();
  Decl *first = d->params;
  if (as_method && first)
    first = first->next;
  if (as_method)
    buf_printf(&b, "tensor.%s(", d->name);
  else
    buf_printf(&b, "%s %s(", d->kind == D_TASK ? "task" : d->kind == D_METHOD ? "fn" : d->kind == D_KERNEL ? "kernel" : "fn",
               d->name);
  int i = 0;
  *active = -1;
  for (Decl *p = first; p; p = p->next, i++) {
    if (p != first)
      buf_puts(&b, ", ");
    int start = (int)b.len;
    buf_puts(&b, lsp_signature(p) + strlen("param "));
    cJSON *pi = cJSON_CreateObject();
    cJSON *lab = cJSON_AddArrayToObject(pi, "label");
    cJSON_AddItemToArray(lab, cJSON_CreateNumber(start));
    cJSON_AddItemToArray(lab, cJSON_CreateNumber((double)b.len));
    cJSON_AddItemToArray(ps, pi);
    if (argname ? !strcmp(argname, p->name) : i == argi)
      *active = i;
  }
  buf_putc(&b, ')');
  const char *full = lsp_signature(d), *arrow = NULL;
  for (const char *q = strstr(full, ") -> "); q; q = strstr(q + 1, ") -> "))
    arrow = q; /* the last one: a parameter may have a fn type */
  if (arrow)
    buf_puts(&b, arrow + 1);
  cJSON_AddStringToObject(si, "label", b.data);
  buf_free(&b);
  const char *doc = lsp_doc_comment(d);
  if (doc) {
    cJSON *dj = cJSON_AddObjectToObject(si, "documentation");
    cJSON_AddStringToObject(dj, "kind", "markdown");
    cJSON_AddStringToObject(dj, "value", doc);
  }
  cJSON_AddItemToObject(si, "parameters", ps);
  if (*active >= 0)
    cJSON_AddNumberToObject(si, "activeParameter", *active);
  return si;
}

/* The declarations a callee written as text names: `f`, `mod.f`, `x.m`. */
static int callee_decls(Analysis *a, const char *t, int paren, Decl **out, int max, bool *method) {
  int e = paren;
  if (e > 0 && t[e - 1] == '>') { /* f<T>( */
    while (e > 0 && t[e - 1] != '<')
      e--;
    e = e > 0 ? e - 1 : 0;
  }
  int s = e;
  while (s > 0 && ident_char(t[s - 1]))
    s--;
  if (s == e)
    return 0;
  const char *name = arena_strndup(t + s, (size_t)(e - s));
  int n = 0;
  *method = false;
  if (s > 0 && t[s - 1] == '.') {
    int r = s - 1, q = r;
    while (q > 0 && ident_char(t[q - 1]))
      q--;
    const char *recv = arena_strndup(t + q, (size_t)(r - q));
    Scope sc = {.name = recv};
    Decl *fn, *actor;
    scope_collect(a, q, &sc, &fn, &actor);
    Decl *list = NULL;
    if (sc.found && sc.found->ty) {
      Type *ty = sc.found->ty;
      if (ty->kind == TY_STRUCT || ty->kind == TY_ACTOR || ty->kind == TY_GROUP)
        list = ty->decl ? ty->decl->methods : NULL;
      if (ty->kind == TY_TENSOR) {
        list = std_nn(a) ? std_nn(a)->decls : NULL;
        *method = true;
      }
    } else {
      Module *m = module_for(a, recv);
      list = m ? m->decls : NULL;
    }
    for (Decl *d = list; d && n < max; d = d->next)
      if (d->name && !strcmp(d->name, name) && d->kind != D_FIELD)
        for (Decl *o = d; o && n < max; o = o->kind == D_FN ? o->overload : NULL)
          out[n++] = o;
    return n;
  }
  Decl *actor;
  enclosing(a->prog.main, paren, &actor);
  for (Decl *m = actor ? actor->methods : NULL; m && n < max; m = m->next)
    if (!strcmp(m->name, name))
      out[n++] = m;
  for (Decl *d = a->prog.main ? a->prog.main->decls : NULL; d && n < max; d = d->next)
    if (d->name && !strcmp(d->name, name) && d->kind != D_IMPORT && d->kind != D_STRUCT)
      out[n++] = d;
  for (Decl *d = a->prog.main ? a->prog.main->decls : NULL; d && !n; d = d->next)
    if (d->kind == D_IMPORT) {
      Module *m = module_for(a, d->name);
      for (Decl *g = m ? m->decls : NULL; g && n < max; g = g->next)
        if (g->kind == D_FN && g->is_global && !strcmp(g->name, name))
          for (Decl *o = g; o && n < max; o = o->overload)
            out[n++] = o;
    }
  return n;
}

cJSON *lsp_signature_help(Doc *doc, cJSON *params) {
  int off = cursor_of(doc, params);
  if (off < 0 || in_string_or_comment(doc->text, off))
    return NULL;
  int argi = 0;
  const char *argname = NULL;
  char *t = doc->text;
  int paren = open_call(t, off, &argi, &argname);
  if (paren < 0)
    return NULL;
  argname = argname ? strdup(argname) : NULL; /* the analysis frees the arena */
  bool patched;
  Analysis a = analyze_patched(doc, off, off, "", &patched);
  Decl *ds[16];
  bool method;
  int n = callee_decls(&a, t, paren, ds, 16, &method);
  if (!n) {
    free((char *)argname);
    return NULL;
  }
  cJSON *r = cJSON_CreateObject();
  cJSON *sigs = cJSON_AddArrayToObject(r, "signatures");
  int pick = 0;
  for (int i = 0; i < n; i++) {
    int active;
    cJSON_AddItemToArray(sigs, signature_info(ds[i], method, argi, argname, &active));
    if (active >= 0 && pick == 0 && i > 0 && !cJSON_GetObjectItem(cJSON_GetArrayItem(sigs, 0), "activeParameter"))
      pick = i;
  }
  cJSON_AddNumberToObject(r, "activeSignature", pick);
  cJSON *first = cJSON_GetObjectItem(cJSON_GetArrayItem(sigs, pick), "activeParameter");
  cJSON_AddNumberToObject(r, "activeParameter", first ? first->valueint : argi);
  free((char *)argname);
  return r;
}
