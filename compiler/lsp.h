/*
 * lsp.h — what the language server's files share (lsp.c, lsp_find.c,
 * lsp_complete.c, lsp_refs.c).  Not part of sflowc.h: only the server
 * needs cJSON and these helpers.
 *
 * Every request analyses its document afresh with the command line's
 * front end; an Analysis stays valid until the next analyze() call, which
 * frees the arena.  Positions are UTF-16 code units, as LSP wants.
 */
#ifndef SFLOW_LSP_H
#define SFLOW_LSP_H

#include "sflowc.h"

#include <cjson/cJSON.h>

typedef struct Doc Doc;
struct Doc {
  char *uri;
  char *text;
  size_t len;
  Doc *next;
};

typedef struct {
  Program prog;
  int file;
  bool parsed; /* no syntax error */
  bool ok;     /* no error at all */
} Analysis;

/* lsp.c */
extern Doc *lsp_docs;
extern char *lsp_root; /* the workspace folder from initialize, or NULL */
Doc *lsp_doc_find(const char *uri);
/* didOpen/didChange and didClose (lsp_doc.c). */
void lsp_doc_set(const char *uri, const char *text);
void lsp_doc_close(const char *uri);
/* Runs the front end on text as if it were the file path; diags (or NULL)
 * receives the diagnostics. */
Analysis lsp_analyze_text(const char *path, const char *text, size_t len, cJSON *diags);
Analysis lsp_analyze(Doc *doc, cJSON *diags);
/* The parse alone: no imports loaded, no types. */
Analysis lsp_parse_text(const char *path, const char *text, size_t len);
const char *lsp_uri_to_path(const char *uri);
const char *lsp_path_to_uri(const char *path);
cJSON *lsp_range(Loc loc);
cJSON *lsp_position(Source *s, int line, int off);
int lsp_offset_of(Source *s, int line, int character);
int lsp_request_offset(Analysis *a, cJSON *params);
const char *lsp_str_at(cJSON *obj, const char *a, const char *b);

/* lsp_find.c: what is under the cursor, hover, definition, doc comments */
typedef struct {
  int file, off;
  Node *node;     /* the innermost name-like node under the cursor */
  Node *call;     /* the N_CALL whose callee that node is, if any */
  TypeExpr *texpr;
  Decl *decl;     /* a declaration whose name is under the cursor */
  Module *mod;
} Hit;
Hit lsp_find_at(Analysis *a, int off);
/* The declaration the hit names (a Decl) or the variable (a Var); one of
 * the two, or neither for a builtin or a bare type. */
bool lsp_target(Analysis *a, Hit *h, Decl **decl, Var **var);
/* "fn norm(p: Point) -> f64", from the declaration as written. */
const char *lsp_signature(Decl *d);
/* The // comment lines directly above d (or after it on its line), without
 * the slashes; NULL when there are none. */
const char *lsp_doc_comment(Decl *d);
/* Where a declaration in a std module can be opened: the embedded source
 * written once, read-only, under the user's cache folder. */
const char *lsp_std_file(const char *std_path);
/* Is path one of those copies?  (Its diagnostics are not the user's.) */
bool lsp_is_std_copy(const char *path);
/* The path to give the client for source s (std sources: lsp_std_file). */
const char *lsp_source_path(Source *s);
cJSON *lsp_hover(Analysis *a, cJSON *params);
cJSON *lsp_definition(Analysis *a, cJSON *params);
cJSON *lsp_document_symbols(Analysis *a);
/* The module a name imported in m stands for ("nn" -> std.nn), or NULL. */
Module *lsp_module_of_alias(Program *p, Module *m, const char *alias);

/* lsp_complete.c */
cJSON *lsp_completion(Doc *doc, cJSON *params);
cJSON *lsp_signature_help(Doc *doc, cJSON *params);

/* lsp_refs.c: references, rename, workspace symbols */
cJSON *lsp_references(Doc *doc, cJSON *params, const char **err);
cJSON *lsp_rename(Doc *doc, cJSON *params, const char **err);
cJSON *lsp_workspace_symbols(cJSON *params);

/* fmt.c: the formatter (also `sflowc fmt`) */
/* The canonical layout of text (heap string), or NULL with why set when
 * the text does not lex. */
char *fmt_text(const char *path, const char *text, size_t len, const char **why);

#endif
