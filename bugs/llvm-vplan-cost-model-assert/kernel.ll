; Reduced from a refgrad fuzz finding on LLVM (an int32 max-reduction of guarded remainders over 9 elements):
;   for (i = 0; i < 9; i++) acc = max(acc, (a[i] % g(b[i] + bb[i])) % g(c[i] % g(e[i])))
; where g(d) is 1 where C's remainder is undefined (d == 0, or INT_MIN % -1) and d elsewhere.
; `opt -passes='default<O3>' -mcpu=skylake-avx512` on an assertions build: the loop vectorizer asserts
; "VPlan cost model and legacy cost model disagreed". Any other trip count (8, 16, 100) passes.
define i32 @f(ptr %a, ptr %b, ptr %bb, ptr %c, ptr %e) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
  %acc = phi i32 [ -2147483648, %entry ], [ %max, %loop ]
  %pa = getelementptr inbounds i32, ptr %a, i64 %i
  %x = load i32, ptr %pa
  %pb = getelementptr inbounds i32, ptr %b, i64 %i
  %y0 = load i32, ptr %pb
  %pbb = getelementptr inbounds i32, ptr %bb, i64 %i
  %y1 = load i32, ptr %pbb
  %y = add i32 %y0, %y1
  %z1 = icmp eq i32 %y, 0
  %m1 = icmp eq i32 %x, -2147483648
  %n1 = icmp eq i32 %y, -1
  %o1 = and i1 %m1, %n1
  %g1 = or i1 %z1, %o1
  %d1 = select i1 %g1, i32 1, i32 %y
  %r2 = srem i32 %x, %d1
  %pc = getelementptr inbounds i32, ptr %c, i64 %i
  %v = load i32, ptr %pc
  %pe = getelementptr inbounds i32, ptr %e, i64 %i
  %w = load i32, ptr %pe
  %z2 = icmp eq i32 %w, 0
  %m2 = icmp eq i32 %v, -2147483648
  %n2 = icmp eq i32 %w, -1
  %o2 = and i1 %m2, %n2
  %g2 = or i1 %z2, %o2
  %d2 = select i1 %g2, i32 1, i32 %w
  %r3 = srem i32 %v, %d2
  %z3 = icmp eq i32 %r3, 0
  %d3 = select i1 %z3, i32 1, i32 %r3
  %r4 = srem i32 %r2, %d3
  %max = call i32 @llvm.smax.i32(i32 %acc, i32 %r4)
  %i.next = add nuw nsw i64 %i, 1
  %done = icmp eq i64 %i.next, 9
  br i1 %done, label %exit, label %loop
exit:
  ret i32 %max
}
declare i32 @llvm.smax.i32(i32, i32)
