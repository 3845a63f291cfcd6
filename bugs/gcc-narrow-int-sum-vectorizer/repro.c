#include <stdint.h>
#include <stdio.h>
/* Eight interleaved int8 sums, wrapping (the casts make every step defined), added at the end. */
__attribute__((noinline)) int8_t sum8(const int8_t *a) {
  int8_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
  for (int i = 0; i < 64; i += 8) {
    s0 = (int8_t)((uint32_t)s0 + (uint32_t)a[i + 0]);
    s1 = (int8_t)((uint32_t)s1 + (uint32_t)a[i + 1]);
    s2 = (int8_t)((uint32_t)s2 + (uint32_t)a[i + 2]);
    s3 = (int8_t)((uint32_t)s3 + (uint32_t)a[i + 3]);
    s4 = (int8_t)((uint32_t)s4 + (uint32_t)a[i + 4]);
    s5 = (int8_t)((uint32_t)s5 + (uint32_t)a[i + 5]);
    s6 = (int8_t)((uint32_t)s6 + (uint32_t)a[i + 6]);
    s7 = (int8_t)((uint32_t)s7 + (uint32_t)a[i + 7]);
  }
  return (int8_t)((uint32_t)s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7);
}
int main(void) {
  int8_t a[64];
  for (int i = 0; i < 64; i++) a[i] = (int8_t)(i * 37 - 100);
  int expected = 0;
  for (volatile int i = 0; i < 64; i++) expected = (int8_t)(expected + a[i]);
  int8_t got = sum8(a);
  printf("sum of 64 int8: got %d, expected %d\n", got, expected);
  return got != expected;
}
