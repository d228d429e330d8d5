" Vim syntax file
" Language:    sflow
" Filenames:   *.sflow
"
" The word lists must match grammar/keywords.txt, the one list of sflow's
" reserved words; tests/editors/keywords_test.py checks that, and
" tests/editors/vim_test.py checks the groups at positions of a sample file.
" Builtins are keywords here (highlighted even when not called), which is the
" Vim custom; the TextMate grammar highlights them only before '('.

if exists("b:current_syntax")
  finish
endif

let s:cpo_save = &cpo
set cpo&vim

" Keywords.  A definition keyword hands the next word to sflowFunction or
" sflowTypeName, so the name at a definition gets its own group.
syn keyword sflowConditional if else
syn keyword sflowRepeat      while for in
syn keyword sflowStatement   return break continue
syn keyword sflowKeyword     await spawn launch
syn keyword sflowKeyword     fn task kernel workflow nextgroup=sflowFunction skipwhite
syn keyword sflowStructure   actor struct nextgroup=sflowTypeName skipwhite
syn keyword sflowStorage     const let var
syn keyword sflowInclude     import
syn keyword sflowBoolean     true false
syn keyword sflowType        bool i32 i64 f32 f64 str future group map tensor
syn keyword sflowBuiltin     print len sqrt exp log tanh abs min max pow floor now
syn keyword sflowBuiltin     rand_seed rand_f32 fmt fail attempt node_id hostname
syn keyword sflowBuiltin     thread_id group_rank group_size allreduce_sum allreduce_mean
syn keyword sflowBuiltin     broadcast allgather barrier zeros_f32 zeros_f64 zeros_i32
syn keyword sflowBuiltin     zeros_i64 matmul sin cos tan atan2 ceil round rand_int
syn keyword sflowBuiltin     randn_f32 sort argsort join failure
syn keyword sflowConstant    PI

syn match sflowFunction "\h\w*" contained
syn match sflowTypeName "\h\w*" contained

" @name or @name(args) before an item.
syn match sflowAnnotation "@\h\w*"

" Operators come before comments: at the same column the item defined last
" wins, so '//' and '/*' start comments rather than a '/' operator.
syn match sflowOperator "[-+*/%=!<>&|^]"
syn match sflowOperator "->\|\.\.\|&&\|||\|<<\|>>\|[-+*/=!<>]="
" `a @ b` (matmul of tensors): an @ that no name follows.
syn match sflowOperator "@\h\@!"

" Numbers: 42, 0x2A, 1_000_000; floats 1.0, 3e-4, .5, 1e+20.  Floats are
" defined after integers so that '1' in '1.0' is not an integer.
syn match sflowNumber "\<\d[0-9_]*\>"
syn match sflowNumber "\<0[xX]\x[0-9A-Fa-f_]*\>"
syn match sflowFloat  "\<\d[0-9_]*\.\d[0-9_]*\%([eE][+-]\=\d[0-9_]*\)\=\>"
syn match sflowFloat  "\<\d[0-9_]*[eE][+-]\=\d[0-9_]*\>"
syn match sflowFloat  "\%(\w\|\.\)\@1<!\.\d[0-9_]*\%([eE][+-]\=\d[0-9_]*\)\=\>"

" Strings end at the closing quote or, unterminated, at the end of the line.
syn region sflowString start=+"+ skip=+\\\\\|\\"+ end=+"+ end=+$+ contains=sflowEscape,sflowEscapeError,@Spell
syn match sflowEscapeError "\\." contained
syn match sflowEscape      "\\\%([nt\\"]\|u{\x\{1,6}}\)" contained

" Comments (block comments do not nest).
syn keyword sflowTodo contained TODO FIXME XXX NOTE
syn region sflowComment start="//" end="$" contains=sflowTodo,@Spell
syn region sflowComment start="/\*" end="\*/" contains=sflowTodo,@Spell

syn sync minlines=200

hi def link sflowConditional Conditional
hi def link sflowRepeat      Repeat
hi def link sflowStatement   Statement
hi def link sflowKeyword     Keyword
hi def link sflowStructure   Structure
hi def link sflowStorage     StorageClass
hi def link sflowInclude     Include
hi def link sflowBoolean     Boolean
hi def link sflowType        Type
hi def link sflowTypeName    Typedef
hi def link sflowBuiltin     Function
hi def link sflowConstant    Constant
hi def link sflowFunction    Function
hi def link sflowAnnotation  PreProc
hi def link sflowOperator    Operator
hi def link sflowNumber      Number
hi def link sflowFloat       Float
hi def link sflowString      String
hi def link sflowEscape      SpecialChar
hi def link sflowEscapeError Error
hi def link sflowTodo        Todo
hi def link sflowComment     Comment

let b:current_syntax = "sflow"

let &cpo = s:cpo_save
unlet s:cpo_save
