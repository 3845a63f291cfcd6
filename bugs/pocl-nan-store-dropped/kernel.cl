// Each kernel stores a NaN the compiler can see. PoCL 3.1 drops the store: out[0] keeps what it held.
__kernel void exp2_of_nan(__global float *out) { out[0] = exp2(NAN); }
__kernel void trunc_of_nan(__global float *out) { out[0] = trunc(NAN); }
