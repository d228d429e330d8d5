/*
 * lexer_raw.h — the interface between the flex scanner (grammar/sflow.l)
 * and the token filter in lexer.c.  Raw token kinds that never reach the
 * parser live above the bison token range.
 */
#ifndef SFLOW_LEXER_RAW_H
#define SFLOW_LEXER_RAW_H

enum {
  RAW_SKIP = 10000,          /* whitespace, comments */
  RAW_COMMENT_NL,            /* a block comment that spanned a newline */
  RAW_UNTERMINATED_COMMENT,
  RAW_UNTERMINATED_STRING,
  RAW_BAD_NUMBER,            /* 12abc */
  RAW_BAD_BYTE,
  RAW_HEX,
};

struct RawExtra {
  long pos;           /* byte offset of the current token */
  long comment_start; /* offset of the open block comment */
  int comment_nl;
};

#endif
