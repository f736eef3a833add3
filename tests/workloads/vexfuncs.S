/* Functions whose FIRST instruction is VEX-encoded (AVX/AVX2), each followed by legacy code, and whose
 * result depends on that first instruction having executed exactly as written. A uprobe on such an
 * entry that the kernel mis-decodes/mis-emulates changes the result, which vexfuncs.c detects.
 * Opcode bytes of the first instructions (checked by the tests with objdump):
 *   vex_bcast78: c4 e2 79 78 c0   vpbroadcastb %xmm0,%xmm0     (VEX.128.66.0F38.W0 78 /r)
 *   vex_store7f: c5 fa 7f 07      vmovdqu %xmm0,(%rdi)         (VEX.128.F3.0F.WIG 7F /r)
 *   vex_sub_e8:  c5 f9 e8 c1      vpsubsb %xmm1,%xmm0,%xmm0    (VEX.128.66.0F.WIG E8 /r)
 */
	.text

/* int vex_bcast78(__m128i v): the low byte of v broadcast to all bytes; returns the low dword.
 * The caller puts other values in bytes 1..3, so a skipped broadcast is visible. */
	.globl	vex_bcast78
	.type	vex_bcast78, @function
	.p2align 4
vex_bcast78:
	vpbroadcastb %xmm0, %xmm0
	vmovd	%xmm0, %eax
	ret
	.size	vex_bcast78, .-vex_bcast78

/* void *vex_store7f(void *dst, __m128i v): stores the 16 bytes of v at dst (unaligned); returns dst. */
	.globl	vex_store7f
	.type	vex_store7f, @function
	.p2align 4
vex_store7f:
	vmovdqu	%xmm0, (%rdi)
	movq	%rdi, %rax
	ret
	.size	vex_store7f, .-vex_store7f

/* int vex_sub_e8(__m128i a, __m128i b): signed saturating byte subtract a - b; returns the low dword. */
	.globl	vex_sub_e8
	.type	vex_sub_e8, @function
	.p2align 4
vex_sub_e8:
	vpsubsb	%xmm1, %xmm0, %xmm0
	movd	%xmm0, %eax
	ret
	.size	vex_sub_e8, .-vex_sub_e8

	.section .note.GNU-stack,"",@progbits
