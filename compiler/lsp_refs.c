/*
 * lsp_refs.c — find references, rename and workspace symbols.
 *
 * A symbol is known by where its name is declared: the file's path and
 * the byte offset of the name.  That key survives re-analysis, so the
 * references are collected from several programs one after another: the
 * document's own (its file and every file it imports) and those of the
 * other open documents, which may import the file the symbol is in.  Each
 * analysis frees the previous one's arena, so the places found are copied
 * out (path, offsets) before the next one runs.
 *
 * Rename refuses names declared in a std module (they are sflowc's, not
 * the program's), names that are not identifiers and keywords.
 */
#include "lsp.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  char *path;
  int off;
} Key;

typedef struct {
  char *path;
  int off, len;
  int line, col16, end16; /* LSP position (0-based line, UTF-16 columns) */
} Place;

typedef struct {
  Key key;
  Place *v;
  int n, cap;
  Module *mod; /* the module being walked */
  Analysis *a;
} Refs;

static bool key_is(Refs *r, Loc l) {
  Source *s = src_get(l.file);
  return s && l.off == r->key.off && !strcmp(s->path, r->key.path);
}

/* Records the name at l (its first len bytes) once. */
static void add(Refs *r, Loc l, const char *name) {
  Source *s = src_get(l.file);
  if (!s || !name || l.off < 0 || (size_t)l.off + strlen(name) > s->len ||
      strncmp(s->text + l.off, name, strlen(name)))
    return; /* a location that does not spell the name (a synthesized node) */
  for (int i = 0; i < r->n; i++)
    if (r->v[i].off == l.off && !strcmp(r->v[i].path, s->path))
      return;
  if (r->n == r->cap) {
    r->cap = r->cap ? 2 * r->cap : 16;
    r->v = realloc(r->v, sizeof(Place) * (size_t)r->cap);
  }
  cJSON *rg = lsp_range((Loc){l.file, l.line, l.col, l.off, (int)strlen(name)});
  cJSON *st = cJSON_GetObjectItem(rg, "start"), *en = cJSON_GetObjectItem(rg, "end");
  r->v[r->n++] = (Place){strdup(s->path), l.off, (int)strlen(name),
                         cJSON_GetObjectItem(st, "line")->valueint,
                         cJSON_GetObjectItem(st, "character")->valueint,
                         cJSON_GetObjectItem(en, "character")->valueint};
  cJSON_Delete(rg);
}

static bool decl_is(Refs *r, Decl *d) { return d && key_is(r, d->name_loc); }
static bool var_is(Refs *r, Var *v) {
  return v && (v->decl ? decl_is(r, v->decl) : key_is(r, v->loc));
}

static void walk_texpr(Refs *r, TypeExpr *t) {
  if (!t)
    return;
  if (t->kind == TE_NAME) {
    Module *m = t->module ? lsp_module_of_alias(&r->a->prog, r->mod, t->module) : r->mod;
    for (Decl *d = m ? m->decls : NULL; d; d = d->next)
      if ((d->kind == D_STRUCT || d->kind == D_ACTOR) && !strcmp(d->name, t->name) && decl_is(r, d)) {
        /* The name is the last part of mod.Name. */
        Loc l = t->loc;
        if (t->module)
          l.off += l.len - (int)strlen(t->name), l.col += l.len - (int)strlen(t->name);
        add(r, l, t->name);
      }
    return;
  }
  for (TypeExpr *p = t->kind == TE_FN ? t->arg : NULL; p; p = p->next)
    walk_texpr(r, p);
  if (t->kind == TE_FN) {
    walk_texpr(r, t->ret);
    return;
  }
  walk_texpr(r, t->arg);
  walk_texpr(r, t->arg2);
}

static void walk_node(Refs *r, Node *n);

static void walk_list(Refs *r, Node *n) {
  for (; n; n = n->next)
    walk_node(r, n);
}

static Loc name_loc_of(Node *n) {
  return n->kind == N_NAME ? n->loc : n->name_loc;
}

static void walk_node(Refs *r, Node *n) {
  if (!n)
    return;
  switch (n->kind) {
  case N_NAME:
    if (var_is(r, n->var) || (!n->var && decl_is(r, n->decl)))
      add(r, n->loc, n->name);
    break;
  case N_LET: case N_FOR: case N_COMPREH:
    if (var_is(r, n->var))
      add(r, n->name_loc, n->name);
    break;
  case N_FIELD: case N_LAUNCH:
    if (decl_is(r, n->decl))
      add(r, n->name_loc, n->name);
    break;
  case N_STRUCT_LIT:
    if (decl_is(r, n->decl))
      add(r, n->name_loc, n->name);
    for (Node *f = n->args; f; f = f->next)
      for (Decl *fd = n->decl ? n->decl->fields : NULL; fd; fd = fd->next)
        if (f->kind == N_FIELD_INIT && !strcmp(fd->name, f->name) && decl_is(r, fd))
          add(r, f->name_loc, f->name);
    break;
  case N_CALL:
    if (decl_is(r, n->decl) && (n->callee->kind == N_NAME || n->callee->kind == N_FIELD))
      add(r, name_loc_of(n->callee), n->callee->name);
    /* Named arguments name the parameters of the callee. */
    for (Node *a = n->args; a; a = a->next)
      for (Decl *p = a->argname && n->decl ? n->decl->params : NULL; p; p = p->next)
        if (!strcmp(p->name, a->argname) && decl_is(r, p))
          add(r, a->name_loc, a->argname);
    break;
  default:
    break;
  }
  walk_texpr(r, n->texpr);
  walk_node(r, n->lhs);
  walk_node(r, n->rhs);
  walk_node(r, n->cond);
  walk_node(r, n->then);
  walk_node(r, n->els);
  walk_node(r, n->callee);
  walk_list(r, n->args);
  if (n->kind == N_BLOCK)
    walk_list(r, n->body);
  else
    walk_node(r, n->body);
}

static void walk_decl(Refs *r, Decl *d) {
  if (decl_is(r, d) && d->kind != D_IMPORT && d->kind != D_INIT)
    add(r, d->name_loc, d->name);
  walk_texpr(r, d->texpr);
  walk_texpr(r, d->ret);
  for (Decl *p = d->params; p; p = p->next)
    walk_decl(r, p);
  for (Decl *f = d->fields; f; f = f->next)
    walk_decl(r, f);
  if (d->init)
    walk_decl(r, d->init);
  for (Decl *m = d->methods; m; m = m->next)
    walk_decl(r, m);
  walk_node(r, d->value);
  walk_node(r, d->body);
}

/* Every reference in the program a analysed, std modules left out. */
static void walk_program(Refs *r, Analysis *a) {
  r->a = a;
  Module *mods = a->prog.modules ? a->prog.modules : a->prog.main;
  for (Module *m = mods; m; m = a->prog.modules ? m->next : NULL) {
    if (strncmp(m->name ? m->name : "", "std.", 4)) {
      r->mod = m;
      for (Decl *d = m->decls; d; d = d->next)
        walk_decl(r, d);
    }
  }
}

/* The symbol under the cursor: its key, name, and whether std declares it. */
static bool symbol_at(Doc *doc, cJSON *params, Refs *r, char **name, bool *in_std, const char **err) {
  Analysis a = lsp_analyze(doc, NULL);
  if (!a.parsed) {
    /* Without sema nothing is resolved: the answer would be partial. */
    *err = "the file has a syntax error; fix it first";
    return false;
  }
  int off = lsp_request_offset(&a, params);
  if (off < 0) {
    *err = "no position";
    return false;
  }
  Hit h = lsp_find_at(&a, off);
  Decl *d;
  Var *v;
  if (!lsp_target(&a, &h, &d, &v)) {
    *err = "no symbol here";
    return false;
  }
  Loc at = d ? d->name_loc : v->loc;
  Source *s = src_get(at.file);
  if (!s)
    return false;
  r->key.path = strdup(s->path);
  r->key.off = at.off;
  *name = strdup(d ? d->name : v->name);
  *in_std = !strncmp(s->path, "<std>/", 6);
  return true;
}

/* References from the document's program and every other open one. */
static void collect(Doc *doc, Refs *r) {
  Analysis a = lsp_analyze(doc, NULL);
  walk_program(r, &a);
  for (Doc *o = lsp_docs; o; o = o->next)
    if (o != doc) {
      a = lsp_analyze(o, NULL);
      walk_program(r, &a);
    }
}

static void refs_free(Refs *r, char *name) {
  for (int i = 0; i < r->n; i++)
    free(r->v[i].path);
  free(r->v);
  free(r->key.path);
  free(name);
}

static cJSON *range_json(Place *p) {
  cJSON *rg = cJSON_CreateObject();
  cJSON *st = cJSON_AddObjectToObject(rg, "start");
  cJSON_AddNumberToObject(st, "line", p->line);
  cJSON_AddNumberToObject(st, "character", p->col16);
  cJSON *en = cJSON_AddObjectToObject(rg, "end");
  cJSON_AddNumberToObject(en, "line", p->line);
  cJSON_AddNumberToObject(en, "character", p->end16);
  return rg;
}

/* An open document's URI for path, so edits go to the buffer the client
 * has (its spelling of the URI), else the path's file URI. */
static const char *uri_for(const char *path) {
  for (Doc *d = lsp_docs; d; d = d->next)
    if (!strcmp(lsp_uri_to_path(d->uri), path))
      return d->uri;
  return lsp_path_to_uri(path);
}

cJSON *lsp_references(Doc *doc, cJSON *params, const char **err) {
  Refs r = {0};
  char *name = NULL;
  bool in_std;
  if (!symbol_at(doc, params, &r, &name, &in_std, err))
    return *err && strcmp(*err, "no symbol here") ? NULL : (*err = NULL, cJSON_CreateArray());
  collect(doc, &r);
  cJSON *ctx = cJSON_GetObjectItem(params, "context");
  cJSON *incl = cJSON_GetObjectItem(ctx, "includeDeclaration");
  bool with_decl = !incl || cJSON_IsTrue(incl);
  cJSON *out = cJSON_CreateArray();
  for (int i = 0; i < r.n; i++) {
    if (!with_decl && r.v[i].off == r.key.off && !strcmp(r.v[i].path, r.key.path))
      continue;
    cJSON *l = cJSON_CreateObject();
    cJSON_AddStringToObject(l, "uri", uri_for(r.v[i].path));
    cJSON_AddItemToObject(l, "range", range_json(&r.v[i]));
    cJSON_AddItemToArray(out, l);
  }
  refs_free(&r, name);
  return out;
}

static bool is_identifier(const char *s) {
  if (!s || !((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_'))
    return false;
  for (const char *p = s; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_'))
      return false;
  for (int i = 0; i < sflow_nkeywords; i++)
    if (!strcmp(s, sflow_keywords[i]))
      return false;
  return true;
}

cJSON *lsp_rename(Doc *doc, cJSON *params, const char **err) {
  const char *to = lsp_str_at(params, "newName", NULL);
  if (!is_identifier(to)) {
    *err = arena_printf("cannot rename to '%s': not an identifier (or a keyword)", to ? to : "");
    return NULL;
  }
  char *new_name = strdup(to);
  Refs r = {0};
  char *name = NULL;
  bool in_std;
  if (!symbol_at(doc, params, &r, &name, &in_std, err)) {
    free(new_name);
    return NULL;
  }
  if (in_std) {
    *err = arena_printf("cannot rename '%s': it is declared in the standard library (%s)", name, r.key.path);
    refs_free(&r, name);
    free(new_name);
    return NULL;
  }
  collect(doc, &r);
  cJSON *edit = cJSON_CreateObject();
  cJSON *changes = cJSON_AddObjectToObject(edit, "changes");
  for (int i = 0; i < r.n; i++) {
    const char *uri = uri_for(r.v[i].path);
    cJSON *list = cJSON_GetObjectItem(changes, uri);
    if (!list)
      list = cJSON_AddArrayToObject(changes, uri);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddItemToObject(e, "range", range_json(&r.v[i]));
    cJSON_AddStringToObject(e, "newText", new_name);
    cJSON_AddItemToArray(list, e);
  }
  refs_free(&r, name);
  free(new_name);
  return edit;
}

/* ------------------------------------------------------ workspace symbols */

static bool matches(const char *name, const char *query) {
  if (!*query)
    return true;
  /* The query's letters in order, ignoring case (as editors fuzzy-match). */
  for (const char *q = query; *q; q++) {
    char c = (char)(*q | 0x20);
    while (*name && (char)(*name | 0x20) != c)
      name++;
    if (!*name)
      return false;
    name++;
  }
  return true;
}

static void sym(cJSON *out, const char *name, int kind, const char *container, const char *path, Loc at,
                const char *query) {
  if (!name || !matches(name, query) || cJSON_GetArraySize(out) >= 1000)
    return;
  cJSON *s = cJSON_CreateObject();
  cJSON_AddStringToObject(s, "name", name);
  cJSON_AddNumberToObject(s, "kind", kind);
  if (container)
    cJSON_AddStringToObject(s, "containerName", container);
  cJSON *l = cJSON_AddObjectToObject(s, "location");
  cJSON_AddStringToObject(l, "uri", uri_for(path));
  cJSON_AddItemToObject(l, "range", lsp_range(at));
  cJSON_AddItemToArray(out, s);
}

/* The items of one file, parsed only (no imports, no sema). */
static void file_symbols(cJSON *out, const char *path, const char *text, size_t len, const char *query) {
  Analysis a = lsp_parse_text(path, text, len);
  for (Decl *d = a.prog.main ? a.prog.main->decls : NULL; d; d = d->next) {
    if (d->kind == D_IMPORT)
      continue;
    int kind = d->kind == D_STRUCT ? 23 : d->kind == D_ACTOR ? 5 : d->kind == D_CONST ? 14 : 12;
    sym(out, d->name, kind, NULL, path, d->name_loc, query);
    for (Decl *f = d->fields; f; f = f->next)
      sym(out, f->name, 8, d->name, path, f->name_loc, query);
    for (Decl *m = d->methods; m; m = m->next)
      sym(out, m->name, 6, d->name, path, m->name_loc, query);
  }
}

static bool seen_path(char **seen, int n, const char *p) {
  for (int i = 0; i < n; i++)
    if (!strcmp(seen[i], p))
      return true;
  return false;
}

/* The .sflow files under dir, a few levels deep, build folders skipped. */
static void scan_dir(const char *dir, int depth, char ***files, int *n) {
  if (depth > 4 || *n >= 2000)
    return;
  DIR *dp = opendir(dir);
  if (!dp)
    return;
  struct dirent *e;
  while ((e = readdir(dp)) && *n < 2000) {
    if (e->d_name[0] == '.' || !strcmp(e->d_name, "build") || !strcmp(e->d_name, "node_modules"))
      continue;
    char *p = malloc(strlen(dir) + strlen(e->d_name) + 2);
    sprintf(p, "%s/%s", dir, e->d_name);
    size_t l = strlen(e->d_name);
    if (e->d_type == DT_DIR) {
      scan_dir(p, depth + 1, files, n);
      free(p);
    } else if (l > 6 && !strcmp(e->d_name + l - 6, ".sflow")) {
      *files = realloc(*files, sizeof(char *) * (size_t)(*n + 1));
      (*files)[(*n)++] = p;
    } else {
      free(p);
    }
  }
  closedir(dp);
}

cJSON *lsp_workspace_symbols(cJSON *params) {
  const char *q = lsp_str_at(params, "query", NULL);
  char *query = strdup(q ? q : "");
  cJSON *out = cJSON_CreateArray();
  char **files = NULL;
  int n = 0;
  /* Open documents first: their text is the one being edited. */
  for (Doc *d = lsp_docs; d; d = d->next) {
    files = realloc(files, sizeof(char *) * (size_t)(n + 1));
    files[n++] = strdup(lsp_uri_to_path(d->uri));
    file_symbols(out, files[n - 1], d->text, d->len, query);
  }
  int open = n;
  if (lsp_root)
    scan_dir(lsp_root, 0, &files, &n);
  for (int i = open; i < n; i++) {
    if (seen_path(files, open, files[i]))
      continue;
    size_t len;
    char why[64];
    char *text = read_file(files[i], &len, why, sizeof why);
    if (text)
      file_symbols(out, files[i], text, len, query);
    free(text);
  }
  for (int i = 0; i < n; i++)
    free(files[i]);
  free(files);
  free(query);
  return out;
}
