// Host build of templates/complex_math.cuh.j2 for tests/test_complex_math.py: reads (re, im) pairs
// of R (argv[2]: "f" float, "d" double) from stdin and writes the function argv[1] of each (for
// "pow", pairs of pairs: base, exponent).
#include <math.h>
#include <stdio.h>
#include <string.h>

template <typename R> struct kd_complex {
    R re, im;
    kd_complex() = default;
    kd_complex(R r, R i = R(0)) : re(r), im(i) {}
};
#include "complex_math.cuh.j2"

template <typename R> kd_complex<R> kd_cx_abs(kd_complex<R> z) { return {kd_abs(z), R(0)}; }

template <typename R> int run(const char* name) {
    typedef kd_complex<R> (*Fn)(kd_complex<R>);
    const struct { const char* name; Fn f; } table[] = {
        {"exp", kd_exp<R>},     {"expm1", kd_expm1<R>}, {"log", kd_log<R>},     {"log1p", kd_log1p<R>},
        {"log2", kd_log2<R>},   {"log10", kd_log10<R>}, {"sqrt", kd_sqrt<R>},   {"sin", kd_sin<R>},
        {"cos", kd_cos<R>},     {"tan", kd_tan<R>},     {"sinh", kd_sinh<R>},   {"cosh", kd_cosh<R>},
        {"tanh", kd_tanh<R>},   {"asin", kd_asin<R>},   {"acos", kd_acos<R>},   {"atan", kd_atan<R>},
        {"asinh", kd_asinh<R>}, {"acosh", kd_acosh<R>}, {"atanh", kd_atanh<R>}, {"sign", kd_sign<R>},
        {"abs", kd_cx_abs<R>},
    };
    if (strcmp(name, "pow") == 0) {  // binary: (a.re, a.im, b.re, b.im) quadruples
        R ab[4];
        while (fread(ab, sizeof(R), 4, stdin) == 4) {
            const kd_complex<R> w = kd_pow(kd_complex<R>(ab[0], ab[1]), kd_complex<R>(ab[2], ab[3]));
            const R out[2] = {w.re, w.im};
            fwrite(out, sizeof(R), 2, stdout);
        }
        return 0;
    }
    for (const auto& row : table) {
        if (strcmp(row.name, name) != 0) continue;
        R z[2];
        while (fread(z, sizeof(R), 2, stdin) == 2) {
            const kd_complex<R> w = row.f(kd_complex<R>(z[0], z[1]));
            const R out[2] = {w.re, w.im};
            fwrite(out, sizeof(R), 2, stdout);
        }
        return 0;
    }
    fprintf(stderr, "no function %s\n", name);
    return 2;
}

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    return argv[2][0] == 'f' ? run<float>(argv[1]) : run<double>(argv[1]);
}
