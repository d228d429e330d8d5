#!/usr/bin/env python3
"""Checks run_golden.normalize_llvm: the same function printed by LLVM 14
(typed pointers, pointer bitcasts, zero GEPs of strings) and as LLVM 15+
prints it (opaque pointers, other attributes and comments) must normalize to
the same text, and a real difference must survive."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_golden import normalize_llvm  # noqa: E402

LLVM14 = """; ModuleID = 'x.sflow'
source_filename = "x.sflow"
target datalayout = "e-m:e"
@.str = private unnamed_addr constant [3 x i8] c"hi\\00"
%sf_array = type { i64 }

; Function Attrs: nounwind
define internal i64 @sflow.f(i8* nonnull align 8 %0, { i64, i8* }* %1) #0 {
entry:
  %a = alloca i8*, align 8
  store i8* %0, i8** %a, align 8
  %2 = load i8*, i8** %a, align 8
  %3 = bitcast i8* %2 to %sf_array*
  %4 = getelementptr inbounds %sf_array, %sf_array* %3, i32 0, i32 0, !dbg !12
  %len = load i64, i64* %4, align 8, !tbaa !3
  call void @sf_print_str(i8* getelementptr inbounds ([3 x i8], [3 x i8]* @.str, i32 0, i32 0)) #1
  call void @g(void (i8*)* bitcast (void (i64*)* @h to void (i8*)*))
  br label %done

done:                                             ; preds = %entry
  ret i64 %len
}

attributes #0 = { nounwind }
!3 = !{!4, !4, i64 0}
"""

LLVM15 = """; ModuleID = 'x.sflow'
source_filename = "x.sflow"
@.str = private unnamed_addr constant [3 x i8] c"hi\\00"

; Function Attrs: nounwind memory(none)
define internal i64 @sflow.f(ptr nonnull align 8 %0, ptr %1) #3 {
entry:
  %a = alloca ptr, align 8
  store ptr %0, ptr %a, align 8
  %2 = load ptr, ptr %a, align 8
  %3 = getelementptr inbounds %sf_array, ptr %2, i32 0, i32 0, !dbg !40
  %len = load i64, ptr %3, align 8, !tbaa !7
  call void @sf_print_str(ptr @.str) #2
  call void @g(ptr @h)
  br label %done

done:                                   ; preds = %entry
  ret i64 %len
}
"""


def main():
    a, b = normalize_llvm(LLVM14), normalize_llvm(LLVM15)
    if a != b:
        sys.exit("normalize_llvm differs between LLVM 14 and 15 spellings:\n%s\n---\n%s" % (a, b))
    if "@sflow.f" not in a or "%len = load i64, ptr %3" not in a:
        sys.exit("normalize_llvm lost the function body:\n" + a)
    c = normalize_llvm(LLVM15.replace("load i64, ptr %3", "load i32, ptr %3"))
    if c == b:
        sys.exit("normalize_llvm hides a real difference")
    print("PASS llvm normalization")


if __name__ == "__main__":
    main()
