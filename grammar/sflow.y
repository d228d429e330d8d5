/*
 * sflow.y — the grammar of the sflow language, and the parser built from it.
 *
 * The parser reads the token array made by compiler/lexer.c (newlines are
 * already filtered to statement terminators) and builds the AST of
 * compiler/sflowc.h.  Syntax errors are reported by yyreport_syntax_error
 * in clang/rustc style ("expected expression, found '}'"), with a note at
 * the opener of an unclosed bracket; `error` rules at statement, member and
 * item level let one run report several errors.  LAC keeps the expected
 * token sets exact.
 */
%code requires {
#include "sflowc.h"
typedef struct ParseCtx ParseCtx;
typedef struct { Node *head, *tail; } NodeList;
typedef struct { Decl *head, *tail; } DeclList;
#define YYLTYPE Loc
#define YYLTYPE_IS_DECLARED 1
#define YYLTYPE_IS_TRIVIAL 1
}

%code {
#include <string.h>

int yylex(YYSTYPE *lval, Loc *lloc, ParseCtx *ctx);

struct ParseCtx {
  Token *toks;
  int ntok, pos;
  int last; /* index of the token yylex returned last */
  Module *mod;
  int file;
};

/* A span from the first symbol to the last; an empty rule gets an empty
 * location at the end of the previous symbol. */
#define YYLLOC_DEFAULT(Cur, Rhs, N)                                     \
  do {                                                                  \
    if (N) {                                                            \
      (Cur) = YYRHSLOC(Rhs, 1);                                         \
      (Cur).len = YYRHSLOC(Rhs, N).off + YYRHSLOC(Rhs, N).len - (Cur).off; \
    } else {                                                            \
      (Cur) = YYRHSLOC(Rhs, 0);                                         \
      (Cur).file = YYRHSLOC(Rhs, 0).file;                               \
      (Cur).off += (Cur).len;                                           \
      (Cur).col += (Cur).len;                                           \
      (Cur).len = 0;                                                    \
    }                                                                   \
  } while (0)

static void nl_add(NodeList *l, Node *n) {
  if (!n)
    return;
  if (l->tail)
    l->tail->next = n;
  else
    l->head = n;
  l->tail = n;
}

static void dl_add(DeclList *l, Decl *d) {
  if (!d)
    return;
  if (l->tail)
    l->tail->next = d;
  else
    l->head = d;
  l->tail = d;
}

static Node *mk(NodeKind k, Loc loc) { return node_new(k, loc); }

static Node *binary(int op, Node *l, Node *r, Loc loc) {
  Node *n = mk(N_BINARY, loc);
  n->op = op;
  n->lhs = l;
  n->rhs = r;
  return n;
}

/* t[i, j, a..b]: the chain t[i][j][a..b], which is what the tensor
 * indices mean when every index but the last is a single one (each t[i]
 * drops the first axis, so the next index is along the next axis).  The
 * later links are marked, so sema accepts them on tensors only; a range
 * before the last index would mean a narrow of an inner axis, which the
 * chain cannot express, so it is an error naming the method that can. */
static Node *multi_index(Node *base, Node *first, Node *rest, Loc loc, Loc bracket) {
  Node *cur = mk(N_INDEX, loc);
  cur->lhs = base;
  cur->rhs = first;
  cur->name_loc = bracket;
  for (Node *e = rest, *next; e; e = next) {
    next = e->next;
    e->next = NULL;
    if (cur->rhs->kind == N_RANGE)
      diag_error(cur->rhs->loc, "only the last index of t[...] may be a range: a range along "
                 "an inner axis is t.narrow(axis, start, length)");
    Node *n = mk(N_INDEX, loc);
    n->lhs = cur;
    n->rhs = e;
    n->name_loc = bracket;
    n->multi_index = true;
    cur = n;
  }
  return cur;
}

static Annot *annot_append(Annot *list, Annot *a) {
  if (!list)
    return a;
  Annot *p = list;
  while (p->next)
    p = p->next;
  p->next = a;
  return list;
}

static void yyerror(Loc *loc, ParseCtx *ctx, const char *msg) {
  (void)ctx;
  if (strstr(msg, "exhausted"))
    diag_error(*loc, "program is nested too deeply to parse");
  else
    diag_error(*loc, "%s", msg);
}
}

%define api.pure full
%define parse.error custom
%define parse.lac full
%locations
%param {ParseCtx *ctx}
%expect 0

%union {
  Token tok;
  Node *node;
  NodeList nodes;
  Decl *decl;
  DeclList decls;
  TypeExpr *texpr;
  Annot *annot;
  int op;
}

%token <tok> TOK_IDENT "identifier" TOK_INT "integer literal" TOK_FLOAT "float literal"
%token <tok> TOK_STRING "string literal"
%token TOK_NEWLINE "newline"
%token TOK_FN "'fn'" TOK_TASK "'task'" TOK_ACTOR "'actor'" TOK_KERNEL "'kernel'"
%token TOK_WORKFLOW "'workflow'" TOK_STRUCT "'struct'" TOK_CONST "'const'" TOK_LET "'let'"
%token TOK_VAR "'var'" TOK_IF "'if'" TOK_ELSE "'else'" TOK_WHILE "'while'" TOK_FOR "'for'"
%token TOK_IN "'in'" TOK_RETURN "'return'" TOK_BREAK "'break'" TOK_CONTINUE "'continue'"
%token TOK_AWAIT "'await'" TOK_SPAWN "'spawn'" TOK_LAUNCH "'launch'" TOK_IMPORT "'import'"
%token TOK_TRUE "'true'" TOK_FALSE "'false'"
%token TOK_OROR "'||'" TOK_ANDAND "'&&'" TOK_EQ "'=='" TOK_NE "'!='" TOK_LE "'<='"
%token TOK_GE "'>='" TOK_SHL "'<<'" TOK_SHR "'>>'"
%token TOK_ADD_ASSIGN "'+='" TOK_SUB_ASSIGN "'-='" TOK_MUL_ASSIGN "'*='" TOK_DIV_ASSIGN "'/='"
%token TOK_ARROW "'->'" TOK_DOTDOT "'..'" TOK_LBRACE_STRUCT "'{' of a struct literal"
%token TOK_MAP "'map'"
%token TOK_TARGS "'<' of a type argument"

%type <node> expr unary postfix primary stmt simple_stmt block if_stmt else_opt arg
%type <node> field_init
%type <nodes> stmt_lines stmt_seq args args_opt elems field_inits
%type <decl> item item_core param member member_core field_decl fn_like
%type <decls> items params params_opt members member_seq field_decls
%type <texpr> type ret_opt type_ann_opt generic_open map_head map_open map_type fn_type
%type <texpr> type_list type_list_opt targs
%type <annot> annot annots annots_opt
%type <tok> dotted

/* `fn(i64) -> i64[]` is a function returning an array: the '[' binds to
 * the result type (an array of such functions is written
 * `(fn(i64) -> i64)[]`). */
%precedence TYPE_ARROW
%precedence '['
%nonassoc TOK_DOTDOT
%left TOK_OROR
%left TOK_ANDAND
%left '|'
%left '^'
%left '&'
%left TOK_EQ TOK_NE
%left '<' TOK_LE '>' TOK_GE
%left TOK_SHL TOK_SHR
%left '+' '-'
%left '*' '/' '%' '@'

%start program

%%

/* program: items */
program
  : items                 { ctx->mod->decls = $1.head; }
  ;

/* items: { term | item term | error term } [item] */
items
  : %empty                { $$ = (DeclList){0}; }
  | items TOK_NEWLINE     { $$ = $1; }
  | items ';'             { $$ = $1; }
  | items item TOK_NEWLINE { $$ = $1; dl_add(&$$, $2); }
  | items item ';'        { $$ = $1; dl_add(&$$, $2); }
  | items error TOK_NEWLINE { $$ = $1; yyerrok; }
  ;

/* item: [annots] item_core */
item
  : annots_opt item_core  { $$ = $2; if ($$) { $$->annots = $1; if ($1) $$->loc = loc_span($1->loc, $$->loc); } }
  ;

annots_opt
  : %empty                { $$ = NULL; }
  | annots                { $$ = $1; }
  ;

annots
  : annot                 { $$ = $1; }
  | annots annot          { $$ = annot_append($1, $2); }
  | annots TOK_NEWLINE    { $$ = $1; }
  ;

/* annot: '@' name ['(' args ')'] */
annot
  : '@' TOK_IDENT                  { $$ = annot_new(loc_span(@1, @2), $2.text, NULL); }
  | '@' TOK_IDENT '(' args_opt ')' { $$ = annot_new(loc_span(@1, @5), $2.text, $4.head); }
  ;

item_core
  : TOK_IMPORT dotted
      { $$ = decl_new(D_IMPORT, @$); $$->path = $2.text; $$->name_loc = @2;
        const char *dot = strrchr($2.text, '.'); $$->name = dot ? dot + 1 : $2.text; }
  | TOK_CONST TOK_IDENT type_ann_opt '=' expr
      { $$ = decl_new(D_CONST, @$); $$->name = $2.text; $$->name_loc = @2; $$->texpr = $3; $$->value = $5; }
  | TOK_STRUCT TOK_IDENT '{' field_decls '}'
      { $$ = decl_new(D_STRUCT, @$); $$->name = $2.text; $$->name_loc = @2; $$->fields = $4.head; $$->end_loc = @5;
        for (Decl *f = $$->fields; f; f = f->next) f->parent = $$; }
  | fn_like
  | TOK_ACTOR TOK_IDENT '{' member_seq '}'
      { $$ = decl_new(D_ACTOR, @$); $$->name = $2.text; $$->name_loc = @2; $$->end_loc = @5;
        DeclList fields = {0}, methods = {0};
        for (Decl *m = $4.head, *next; m; m = next) {
          next = m->next; m->next = NULL; m->parent = $$;
          if (m->kind == D_FIELD) dl_add(&fields, m);
          else if (m->kind == D_INIT && !$$->init) $$->init = m;
          else if (m->kind == D_INIT) { diag_error(m->loc, "actor '%s' has more than one init", $2.text);
                                        diag_note($$->init->loc, "the first init is here"); }
          else dl_add(&methods, m);
        }
        $$->fields = fields.head; $$->methods = methods.head; }
  ;

/* fn_like: ('fn' | 'task' | 'kernel' | 'workflow') name '(' params ')' ['->' type] block
 *        | 'fn' name ['<' name '>'] '(' params ')' ['->' type]   (an @extern declaration) */
fn_like
  : TOK_FN TOK_IDENT '(' params_opt ')' ret_opt block
      { $$ = decl_new(D_FN, @$); $$->name = $2.text; $$->name_loc = @2; $$->params = $4.head; $$->ret = $6; $$->body = $7; }
  | TOK_FN TOK_IDENT '(' params_opt ')' ret_opt
      /* no body: only an @extern function of a std module (sema checks) */
      { $$ = decl_new(D_FN, @$); $$->name = $2.text; $$->name_loc = @2; $$->params = $4.head; $$->ret = $6; }
  | TOK_FN TOK_IDENT TOK_TARGS TOK_IDENT '>' '(' params_opt ')' ret_opt
      /* a generic @extern function: one type parameter (sema checks) */
      { $$ = decl_new(D_FN, @$); $$->name = $2.text; $$->name_loc = @2; $$->tparam = $4.text; $$->tparam_loc = @4;
        $$->params = $7.head; $$->ret = $9; }
  | TOK_FN TOK_IDENT TOK_TARGS TOK_IDENT ',' TOK_IDENT '>' '(' params_opt ')' ret_opt
      /* a generic @extern function of two type parameters (sema checks) */
      { $$ = decl_new(D_FN, @$); $$->name = $2.text; $$->name_loc = @2; $$->tparam = $4.text; $$->tparam_loc = @4;
        $$->tparam2 = $6.text; $$->tparam2_loc = @6; $$->params = $9.head; $$->ret = $11; }
  | TOK_FN TOK_IDENT TOK_TARGS TOK_IDENT '>' '(' params_opt ')' ret_opt block
      /* a user's generic function: refused by sema with a message */
      { $$ = decl_new(D_FN, @$); $$->name = $2.text; $$->name_loc = @2; $$->tparam = $4.text; $$->tparam_loc = @4;
        $$->params = $7.head; $$->ret = $9; $$->body = $10; }
  | TOK_TASK TOK_IDENT '(' params_opt ')' ret_opt block
      { $$ = decl_new(D_TASK, @$); $$->name = $2.text; $$->name_loc = @2; $$->params = $4.head; $$->ret = $6; $$->body = $7; }
  | TOK_KERNEL TOK_IDENT '(' params_opt ')' ret_opt block
      { $$ = decl_new(D_KERNEL, @$); $$->name = $2.text; $$->name_loc = @2; $$->params = $4.head; $$->ret = $6; $$->body = $7; }
  | TOK_WORKFLOW TOK_IDENT '(' params_opt ')' ret_opt block
      { $$ = decl_new(D_WORKFLOW, @$); $$->name = $2.text; $$->name_loc = @2; $$->params = $4.head; $$->ret = $6; $$->body = $7; }
  ;

dotted
  : TOK_IDENT             { $$ = $1; }
  | dotted '.' TOK_IDENT  { $$ = $1; $$.text = arena_printf("%s.%s", $1.text, $3.text); }
  ;

ret_opt
  : %empty                { $$ = NULL; }
  | TOK_ARROW type %prec TYPE_ARROW { $$ = $2; }
  ;

type_ann_opt
  : %empty                { $$ = NULL; }
  | ':' type              { $$ = $2; }
  ;

/* type: name | mod.name | type '[' ']' | name '<' type '>' | map_type | fn_type */
type
  : TOK_IDENT             { $$ = texpr_new(TE_NAME, @1); $$->name = $1.text; }
  | TOK_IDENT '.' TOK_IDENT { $$ = texpr_new(TE_NAME, @$); $$->module = $1.text; $$->name = $3.text; }
  | type '[' ']'          { $$ = texpr_new(TE_ARRAY, @$); $$->arg = $1; }
  | generic_open '>'      { $$ = $1; $$->loc = loc_span($1->loc, @2); }
  | TOK_IDENT '<' generic_open TOK_SHR
      { TypeExpr *inner = $3; inner->loc = loc_span(inner->loc, @4);
        $$ = texpr_new(TE_GENERIC, @$); $$->name = $1.text; $$->arg = inner; }
  | map_type
  | TOK_IDENT '<' map_open TOK_SHR
      { TypeExpr *inner = $3; inner->loc = loc_span(inner->loc, @4);
        $$ = texpr_new(TE_GENERIC, @$); $$->name = $1.text; $$->arg = inner; }
  | fn_type
  | '(' fn_type ')'       { $$ = $2; $$->loc = @$; }
  ;

generic_open
  : TOK_IDENT '<' type    { $$ = texpr_new(TE_GENERIC, @$); $$->name = $1.text; $$->arg = $3; }
  ;

/* map_type: 'map' '<' type ',' type '>' — the lexer makes `map` a TOK_MAP
 * only when `<` follows it at once and a name after that, so `map` stays
 * an ordinary name everywhere else (std.data's data.map).  The `>>` forms
 * close a nested generic and the map together. */
map_type
  : map_open '>'          { $$ = $1; $$->loc = loc_span($1->loc, @2); }
  | map_head generic_open TOK_SHR
      { TypeExpr *inner = $2; inner->loc = loc_span(inner->loc, @3);
        $$ = $1; $$->arg2 = inner; $$->loc = loc_span($1->loc, @3); }
  | map_head map_open TOK_SHR
      { TypeExpr *inner = $2; inner->loc = loc_span(inner->loc, @3);
        $$ = $1; $$->arg2 = inner; $$->loc = loc_span($1->loc, @3); }
  ;

map_head
  : TOK_MAP '<' type ','  { $$ = texpr_new(TE_GENERIC, @$); $$->name = "map"; $$->arg = $3; }
  ;

map_open
  : map_head type         { $$ = $1; $$->arg2 = $2; $$->loc = loc_span($1->loc, @2); }
  ;

/* targs: '<' type '>' after a generic function's name, at a call */
targs
  : TOK_TARGS type '>'    { $$ = $2; }
  | TOK_TARGS generic_open TOK_SHR { $$ = $2; $$->loc = loc_span($2->loc, @3); }
  | TOK_TARGS map_open TOK_SHR { $$ = $2; $$->loc = loc_span($2->loc, @3); }
  ;

/* fn_type: 'fn' '(' [type {',' type}] ')' ['->' type] */
fn_type
  : TOK_FN '(' type_list_opt ')' ret_opt
      { $$ = texpr_new(TE_FN, @$); $$->arg = $3; $$->ret = $5; }
  ;

type_list_opt
  : %empty                { $$ = NULL; }
  | type_list             { $$ = $1; }
  | type_list ','         { $$ = $1; }
  ;

type_list
  : type                  { $$ = $1; }
  | type_list ',' type    { $$ = $1; TypeExpr *p = $1; while (p->next) p = p->next; p->next = $3; }
  ;

params_opt
  : %empty                { $$ = (DeclList){0}; }
  | params                { $$ = $1; }
  | params ','            { $$ = $1; }
  ;

params
  : param                 { $$ = (DeclList){0}; dl_add(&$$, $1); }
  | params ',' param      { $$ = $1; dl_add(&$$, $3); }
  ;

/* param: name ':' type ['=' expr] */
param
  : TOK_IDENT ':' type    { $$ = decl_new(D_PARAM, @$); $$->name = $1.text; $$->name_loc = @1; $$->texpr = $3; }
  | TOK_IDENT ':' type '=' expr
      { $$ = decl_new(D_PARAM, @$); $$->name = $1.text; $$->name_loc = @1; $$->texpr = $3; $$->value = $5; }
  ;

/* field_decls: { name ':' type [',' | term] } */
field_decls
  : %empty                { $$ = (DeclList){0}; }
  | field_decls field_decl { $$ = $1; dl_add(&$$, $2); }
  | field_decls ','       { $$ = $1; }
  | field_decls TOK_NEWLINE { $$ = $1; }
  | field_decls ';'       { $$ = $1; }
  | field_decls error TOK_NEWLINE { $$ = $1; yyerrok; }
  ;

field_decl
  : TOK_IDENT ':' type    { $$ = decl_new(D_FIELD, @$); $$->name = $1.text; $$->name_loc = @1; $$->texpr = $3; $$->mutable = true; }
  ;

/* members: { member term } — fields, init and methods of an actor */
members
  : %empty                { $$ = (DeclList){0}; }
  | members TOK_NEWLINE   { $$ = $1; }
  | members ';'           { $$ = $1; }
  | members member TOK_NEWLINE { $$ = $1; dl_add(&$$, $2); }
  | members member ';'    { $$ = $1; dl_add(&$$, $2); }
  | members error TOK_NEWLINE { $$ = $1; yyerrok; }
  ;

/* member_seq: members [member] — the last member may end at the '}' */
member_seq
  : members               { $$ = $1; }
  | members member        { $$ = $1; dl_add(&$$, $2); }
  ;

member
  : annots_opt member_core { $$ = $2; if ($$) { $$->annots = $1; } }
  ;

/* member_core: ('var' | 'let') name [':' type] ['=' expr]
 *            | 'init' '(' params ')' block | 'fn' name '(' params ')' ['->' type] block */
member_core
  : TOK_VAR TOK_IDENT type_ann_opt
      { $$ = decl_new(D_FIELD, @$); $$->name = $2.text; $$->name_loc = @2; $$->texpr = $3; $$->mutable = true;
        if (!$3) diag_error(@2, "field '%s' needs a type or an initial value", $2.text); }
  | TOK_VAR TOK_IDENT type_ann_opt '=' expr
      { $$ = decl_new(D_FIELD, @$); $$->name = $2.text; $$->name_loc = @2; $$->texpr = $3; $$->value = $5; $$->mutable = true; }
  | TOK_LET TOK_IDENT type_ann_opt '=' expr
      { $$ = decl_new(D_FIELD, @$); $$->name = $2.text; $$->name_loc = @2; $$->texpr = $3; $$->value = $5; }
  | TOK_IDENT '(' params_opt ')' block
      { $$ = decl_new(D_INIT, @$); $$->name = $1.text; $$->name_loc = @1; $$->params = $3.head; $$->body = $5;
        if (strcmp($1.text, "init") != 0) {
          diag_error(@1, "expected 'fn', 'var', 'let' or 'init' in actor body, found identifier '%s'", $1.text);
          if (!strcmp($1.text, "def") || !strcmp($1.text, "func") || !strcmp($1.text, "method"))
            diag_note(@1, "methods are declared with 'fn'");
        } }
  | TOK_IDENT TOK_IDENT '(' params_opt ')' ret_opt block
      { /* 'def m()' or 'func m()': a method written in another language */
        $$ = decl_new(D_METHOD, @$); $$->name = $2.text; $$->name_loc = @2; $$->params = $4.head; $$->ret = $6; $$->body = $7;
        diag_error(@1, "expected 'fn', 'var', 'let' or 'init' in actor body, found identifier '%s'", $1.text);
        diag_note(@1, "methods are declared with 'fn'"); }
  | TOK_FN TOK_IDENT '(' params_opt ')' ret_opt block
      { $$ = decl_new(D_METHOD, @$); $$->name = $2.text; $$->name_loc = @2; $$->params = $4.head; $$->ret = $6; $$->body = $7; }
  ;

/* block: '{' stmt_seq '}' */
block
  : '{' stmt_seq '}'      { $$ = mk(N_BLOCK, @$); $$->body = $2.head; $$->name_loc = @3; }
  ;

/* stmt_seq: { [stmt] term } [stmt] */
stmt_seq
  : stmt_lines            { $$ = $1; }
  | stmt_lines stmt       { $$ = $1; nl_add(&$$, $2); }
  | stmt_lines error      { $$ = $1; }
  ;

stmt_lines
  : %empty                { $$ = (NodeList){0}; }
  | stmt_lines TOK_NEWLINE { $$ = $1; }
  | stmt_lines ';'        { $$ = $1; }
  | stmt_lines stmt TOK_NEWLINE { $$ = $1; nl_add(&$$, $2); }
  | stmt_lines stmt ';'   { $$ = $1; nl_add(&$$, $2); }
  | stmt_lines error TOK_NEWLINE { $$ = $1; yyerrok; }
  | stmt_lines error ';'  { $$ = $1; yyerrok; }
  ;

stmt
  : simple_stmt
  | if_stmt
  | TOK_WHILE expr block  { $$ = mk(N_WHILE, @$); $$->cond = $2; $$->body = $3; }
  | TOK_FOR TOK_IDENT TOK_IN expr block
      { $$ = mk(N_FOR, @$); $$->name = $2.text; $$->name_loc = @2; $$->rhs = $4; $$->body = $5; }
  ;

/* if_stmt: 'if' expr block ['else' (if_stmt | block)] */
if_stmt
  : TOK_IF expr block else_opt { $$ = mk(N_IF, @$); $$->cond = $2; $$->then = $3; $$->els = $4; }
  ;

else_opt
  : %empty                { $$ = NULL; }
  | TOK_ELSE block        { $$ = $2; }
  | TOK_ELSE if_stmt      { $$ = $2; }
  ;

simple_stmt
  : TOK_LET TOK_IDENT type_ann_opt '=' expr
      { $$ = mk(N_LET, @$); $$->name = $2.text; $$->name_loc = @2; $$->texpr = $3; $$->lhs = $5; }
  | TOK_VAR TOK_IDENT type_ann_opt '=' expr
      { $$ = mk(N_LET, @$); $$->name = $2.text; $$->name_loc = @2; $$->texpr = $3; $$->lhs = $5; $$->ival = 1; }
  | TOK_LET TOK_IDENT type_ann_opt
      { $$ = mk(N_LET, @$); $$->name = $2.text; $$->name_loc = @2; $$->texpr = $3;
        diag_error(@$, "'let %s' needs an initial value ('let %s = ...')", $2.text, $2.text); }
  | TOK_VAR TOK_IDENT type_ann_opt
      { $$ = mk(N_LET, @$); $$->name = $2.text; $$->name_loc = @2; $$->texpr = $3; $$->ival = 1;
        diag_error(@$, "'var %s' needs an initial value ('var %s = ...')", $2.text, $2.text); }
  | expr '=' expr          { $$ = mk(N_ASSIGN, @$); $$->lhs = $1; $$->op = '='; $$->rhs = $3; $$->name_loc = @2; }
  | expr TOK_ADD_ASSIGN expr { $$ = mk(N_ASSIGN, @$); $$->lhs = $1; $$->op = '+'; $$->rhs = $3; $$->name_loc = @2; }
  | expr TOK_SUB_ASSIGN expr { $$ = mk(N_ASSIGN, @$); $$->lhs = $1; $$->op = '-'; $$->rhs = $3; $$->name_loc = @2; }
  | expr TOK_MUL_ASSIGN expr { $$ = mk(N_ASSIGN, @$); $$->lhs = $1; $$->op = '*'; $$->rhs = $3; $$->name_loc = @2; }
  | expr TOK_DIV_ASSIGN expr { $$ = mk(N_ASSIGN, @$); $$->lhs = $1; $$->op = '/'; $$->rhs = $3; $$->name_loc = @2; }
  | expr                  { $$ = mk(N_EXPR_STMT, @$); $$->lhs = $1; }
  | TOK_BREAK             { $$ = mk(N_BREAK, @$); }
  | TOK_CONTINUE          { $$ = mk(N_CONTINUE, @$); }
  | TOK_RETURN            { $$ = mk(N_RETURN, @$); }
  | TOK_RETURN expr       { $$ = mk(N_RETURN, @$); $$->lhs = $2; }
  ;

expr
  : unary
  | expr TOK_OROR expr    { $$ = binary(TOK_OROR, $1, $3, @$); }
  | expr TOK_ANDAND expr  { $$ = binary(TOK_ANDAND, $1, $3, @$); }
  | expr '|' expr         { $$ = binary('|', $1, $3, @$); }
  | expr '^' expr         { $$ = binary('^', $1, $3, @$); }
  | expr '&' expr         { $$ = binary('&', $1, $3, @$); }
  | expr TOK_EQ expr      { $$ = binary(TOK_EQ, $1, $3, @$); }
  | expr TOK_NE expr      { $$ = binary(TOK_NE, $1, $3, @$); }
  | expr '<' expr         { $$ = binary('<', $1, $3, @$); }
  | expr TOK_LE expr      { $$ = binary(TOK_LE, $1, $3, @$); }
  | expr '>' expr         { $$ = binary('>', $1, $3, @$); }
  | expr TOK_GE expr      { $$ = binary(TOK_GE, $1, $3, @$); }
  | expr TOK_SHL expr     { $$ = binary(TOK_SHL, $1, $3, @$); }
  | expr TOK_SHR expr     { $$ = binary(TOK_SHR, $1, $3, @$); }
  | expr '+' expr         { $$ = binary('+', $1, $3, @$); }
  | expr '-' expr         { $$ = binary('-', $1, $3, @$); }
  | expr '*' expr
      { if ($1->kind == N_SPAWN && !$1->rhs && !$1->parenthesized) { $$ = $1; $$->rhs = $3; $$->loc = @$; }
        else $$ = binary('*', $1, $3, @$); }
  | expr '/' expr         { $$ = binary('/', $1, $3, @$); }
  | expr '%' expr         { $$ = binary('%', $1, $3, @$); }
  | expr '@' expr         { $$ = binary('@', $1, $3, @$); } /* matmul of tensors */
  | expr TOK_DOTDOT expr  { $$ = mk(N_RANGE, @$); $$->lhs = $1; $$->rhs = $3; }
  ;

/* unary: ('-' | '!' | 'await') unary | 'spawn' postfix | postfix */
unary
  : postfix
  | '-' unary             { $$ = mk(N_UNARY, @$); $$->op = '-'; $$->lhs = $2; }
  | '!' unary             { $$ = mk(N_UNARY, @$); $$->op = '!'; $$->lhs = $2; }
  | TOK_AWAIT unary       { $$ = mk(N_AWAIT, @$); $$->lhs = $2; }
  | TOK_SPAWN postfix     { $$ = mk(N_SPAWN, @$); $$->lhs = $2; }
  ;

/* postfix: primary { '(' args ')' | '[' expr { ',' expr } ']' | '.' name } */
postfix
  : primary
  | postfix '(' args_opt ')'
      { $$ = mk(N_CALL, @$); $$->callee = $1; $$->args = $3.head; $$->name_loc = @2; }
  | postfix '[' expr ']'  { $$ = mk(N_INDEX, @$); $$->lhs = $1; $$->rhs = $3; $$->name_loc = @2; }
  | postfix '[' expr ',' elems ']' { $$ = multi_index($1, $3, $5.head, @$, @2); }
  | postfix targs '(' args_opt ')'
      { /* f<T>(args): the lexer marks the '<' (TOK_TARGS) only where a type
         * and '>(' follow it */
        $$ = mk(N_CALL, @$); $$->callee = $1; $$->texpr = $2; $$->args = $4.head; $$->name_loc = @3; }
  | postfix '.' TOK_IDENT { $$ = mk(N_FIELD, @$); $$->lhs = $1; $$->name = $3.text; $$->name_loc = @3; }
  | postfix TOK_LBRACE_STRUCT field_inits '}'
      { /* Name { f: e } or module.Name { f: e }: the lexer only marks a brace
         * as a struct literal's after an identifier. */
        $$ = mk(N_STRUCT_LIT, @$); $$->args = $3.head;
        if ($1->kind == N_NAME) { $$->name = $1->name; $$->name_loc = $1->loc; }
        else if ($1->kind == N_FIELD && $1->lhs->kind == N_NAME) {
          $$->name = $1->name; $$->qual = $1->lhs->name; $$->name_loc = $1->name_loc; }
        else { diag_error(@1, "expected a struct name before '{'"); $$->name = "?"; } }
  ;

primary
  : TOK_INT               { $$ = mk(N_INT, @$); $$->ival = $1.ival; $$->sval = (char *)$1.text; }
  | TOK_FLOAT             { $$ = mk(N_FLOAT, @$); $$->fval = $1.fval; $$->sval = (char *)$1.text; }
  | TOK_STRING            { $$ = mk(N_STR, @$); $$->sval = $1.sval; $$->slen = $1.slen; }
  | TOK_TRUE              { $$ = mk(N_BOOL, @$); $$->ival = 1; }
  | TOK_FALSE             { $$ = mk(N_BOOL, @$); $$->ival = 0; }
  | TOK_IDENT             { $$ = mk(N_NAME, @$); $$->name = $1.text; }
  | '(' expr ')'          { $$ = $2; $$->parenthesized = true; }
  | '[' elems ']'         { $$ = mk(N_ARRAY_LIT, @$); $$->args = $2.head; }
  | '[' ']'               { $$ = mk(N_ARRAY_LIT, @$); }
  | '[' expr TOK_FOR TOK_IDENT TOK_IN expr ']'
      { $$ = mk(N_COMPREH, @$); $$->lhs = $2; $$->name = $4.text; $$->name_loc = @4; $$->rhs = $6; }
  | map_type '(' ')'      { $$ = mk(N_MAP_NEW, @$); $$->texpr = $1; }
  | TOK_LAUNCH TOK_IDENT '[' expr ']' '(' args_opt ')'
      { $$ = mk(N_LAUNCH, @$); $$->name = $2.text; $$->name_loc = @2; $$->rhs = $4; $$->args = $7.head; }
  ;

elems
  : expr                  { $$ = (NodeList){0}; nl_add(&$$, $1); }
  | elems ',' expr        { $$ = $1; nl_add(&$$, $3); }
  | elems ','             { $$ = $1; }
  ;

field_inits
  : field_init            { $$ = (NodeList){0}; nl_add(&$$, $1); }
  | field_inits ',' field_init { $$ = $1; nl_add(&$$, $3); }
  | field_inits ','       { $$ = $1; }
  ;

field_init
  : TOK_IDENT ':' expr    { $$ = mk(N_FIELD_INIT, @$); $$->name = $1.text; $$->name_loc = @1; $$->lhs = $3; }
  ;

args_opt
  : %empty                { $$ = (NodeList){0}; }
  | args                  { $$ = $1; }
  | args ','              { $$ = $1; }
  ;

args
  : arg                   { $$ = (NodeList){0}; nl_add(&$$, $1); }
  | args ',' arg          { $$ = $1; nl_add(&$$, $3); }
  ;

/* arg: [name '='] expr */
arg
  : expr                  { $$ = $1; }
  | TOK_IDENT '=' expr    { $$ = $3; $$->argname = $1.text; $$->name_loc = @1; }
  ;

%%

int yylex(YYSTYPE *lval, Loc *lloc, ParseCtx *ctx) {
  Token *t = &ctx->toks[ctx->pos];
  ctx->last = ctx->pos;
  if (t->kind != 0)
    ctx->pos++;
  *lloc = t->loc;
  lval->tok = *t;
  return t->kind == 0 ? YYEOF : t->kind;
}

/* The token kinds that can start an expression. */
static bool starts_expr(yysymbol_kind_t k) {
  switch (k) {
  case YYSYMBOL_TOK_IDENT: case YYSYMBOL_TOK_INT: case YYSYMBOL_TOK_FLOAT: case YYSYMBOL_TOK_STRING:
  case YYSYMBOL_TOK_TRUE: case YYSYMBOL_TOK_FALSE: case YYSYMBOL_TOK_AWAIT: case YYSYMBOL_TOK_SPAWN:
  case YYSYMBOL_TOK_LAUNCH: case YYSYMBOL_TOK_MAP:
    return true;
  default:
    return false;
  }
}

/* Describes the token at index i for "found ..." */
static const char *describe(ParseCtx *ctx, int i) {
  Token *t = &ctx->toks[i];
  switch (t->kind) {
  case 0: return "end of file";
  case TOK_NEWLINE: return "end of line";
  case TOK_IDENT: return arena_printf("identifier '%s'", t->text);
  case TOK_INT: case TOK_FLOAT: return arena_printf("number '%s'", t->text);
  case TOK_STRING: return "string literal";
  case TOK_LBRACE_STRUCT: return "'{'";
  }
  return tok_name(t->kind);
}

/* The innermost bracket opened before token i and not closed before it. */
static int unclosed_opener(ParseCtx *ctx, int i) {
  int stack[SFLOW_MAX_NESTING + 1];
  int depth = 0;
  for (int j = 0; j < i && j < ctx->ntok; j++) {
    int k = ctx->toks[j].kind;
    if (k == '(' || k == '[' || k == '{' || k == TOK_LBRACE_STRUCT) {
      if (depth < SFLOW_MAX_NESTING)
        stack[depth++] = j;
    } else if ((k == ')' || k == ']' || k == '}') && depth > 0) {
      depth--;
    }
  }
  return depth > 0 ? stack[depth - 1] : -1;
}

static int yyreport_syntax_error(const yypcontext_t *pctx, ParseCtx *ctx) {
  /* Past the error limit nothing is shown, and unclosed_opener is linear:
   * skip the work, or a file of a million bad tokens takes minutes. */
  if (diag_too_many())
    return 0;
  enum { MAX = 40 };
  yysymbol_kind_t expected[MAX];
  int n = yypcontext_expected_tokens(pctx, expected, MAX);
  int at = ctx->last;
  Loc loc = *yypcontext_location(pctx);
  const char *found = describe(ctx, at);
  bool want_expr = false;
  /* "expected expression" only where any expression may come: where just
   * a name may ('let = 1', 'fn while'), the expected tokens are listed. */
  for (int i = 0; i < n; i++)
    if (starts_expr(expected[i]) && expected[i] != YYSYMBOL_TOK_IDENT)
      want_expr = true;
  int kind = ctx->toks[at].kind;
  /* The terminator the lexer adds at the end of the file is the end of
   * the file to the user (and the unclosed-bracket note applies). */
  if (kind == TOK_NEWLINE && ctx->toks[at].loc.len == 0 && ctx->toks[at + 1].kind == 0) {
    kind = 0;
    found = "end of file";
    at++;
  }
  /* A newline ends the statement too early: point just past the last
   * token of the line, which is where users look. */
  if (kind == TOK_NEWLINE || kind == 0) {
    loc.len = 1;
  }
  Buf msg = {0};
  int open0 = unclosed_opener(ctx, at);
  if (kind == 0 && open0 >= 0) {
    Token *o = &ctx->toks[open0];
    int want = o->kind == '(' ? ')' : o->kind == '[' ? ']' : '}';
    diag_error(loc, "unexpected end of file: missing '%c'", want);
    diag_note(o->loc, "to match this '%c'", o->kind == TOK_LBRACE_STRUCT ? '{' : o->kind);
    return 0;
  }
  if (want_expr) {
    buf_printf(&msg, "expected expression, found %s", found);
  } else if (n > 0 && n <= 4) {
    buf_puts(&msg, "expected ");
    for (int i = 0; i < n; i++) {
      if (i > 0)
        buf_puts(&msg, i == n - 1 ? " or " : ", ");
      buf_puts(&msg, expected[i] == YYSYMBOL_TOK_NEWLINE ? "end of line" : yysymbol_name(expected[i]));
    }
    buf_printf(&msg, ", found %s", found);
  } else {
    buf_printf(&msg, "unexpected %s", found);
  }
  diag_error(loc, "%s", msg.data);
  buf_free(&msg);
  int open = unclosed_opener(ctx, at);
  if (open >= 0 && (kind == 0 || kind == ')' || kind == ']' || kind == '}')) {
    Token *o = &ctx->toks[open];
    int want = o->kind == '(' ? ')' : o->kind == '[' ? ']' : '}';
    if (kind != want)
      diag_note(o->loc, "to match this '%c'", o->kind == TOK_LBRACE_STRUCT ? '{' : o->kind);
  }
  return 0;
}

Module *parse_source(int file) {
  int ntok;
  Token *toks = lex_source(file, &ntok);
  Module *m = arena_alloc(sizeof(Module));
  Source *s = src_get(file);
  m->file = file;
  m->name = s->modname;
  if (lex_fatal)
    return m;
  ParseCtx ctx = {toks, ntok, 0, 0, m, file};
  yyparse(&ctx);
  return m;
}
