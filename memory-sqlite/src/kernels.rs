//! The vector arithmetic of the block cache and the store's writes: the `f32` dot product
//! (AVX2 + FMA where the CPU has it) and the int8 one of codes (AVX2), scaling to unit
//! length, int8 quantization, and the byte layout of vec0's `code` column (schema 7), so a
//! code written with a vector and one computed by the cache from it are the same, to the
//! bit.

/// Dot product with eight independent accumulators, so the compiler can keep them in SIMD
/// lanes without reordering a single sum. The portable path (SSE2 on x86_64).
fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// AVX2 + FMA: four 8-lane fused multiply-add accumulators (32 floats per step), which
/// keeps a scan of a scope's block close to memory bandwidth.
#[cfg(target_arch = "x86_64")]
#[expect(
    unsafe_code,
    reason = "AVX2 and FMA intrinsics; callers check the CPU has them"
)]
#[target_feature(enable = "avx2,fma")]
fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::{
        __m256, _mm256_add_ps, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps,
        _mm256_storeu_ps,
    };
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let load = |s: &[f32]| -> __m256 {
        debug_assert!(s.len() >= 8);
        // SAFETY: every caller passes a slice of at least 8 floats, and AVX is enabled on
        // this function; `loadu` has no alignment requirement.
        unsafe { _mm256_loadu_ps(s.as_ptr()) }
    };
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (j, lane) in acc.iter_mut().enumerate() {
            let at = i + 8 * j;
            *lane = _mm256_fmadd_ps(load(&a[at..at + 8]), load(&b[at..at + 8]), *lane);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(load(&a[i..i + 8]), load(&b[i..i + 8]), acc[0]);
        i += 8;
    }
    let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut lanes = [0.0f32; 8];
    // SAFETY: `lanes` holds exactly 8 floats; `storeu` has no alignment requirement.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
    let tail: f32 = a[i..].iter().zip(&b[i..]).map(|(x, y)| x * y).sum();
    lanes.iter().sum::<f32>() + tail
}

/// Which dot product this CPU runs, decided once per scan.
pub(crate) fn dot_fn() -> fn(&[f32], &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        #[expect(
            unsafe_code,
            reason = "calls the SIMD kernel once the CPU is known to have it"
        )]
        return |a, b| {
            // SAFETY: the CPU supports AVX2 and FMA, checked just above before this
            // function was handed out.
            unsafe { dot_avx2(a, b) }
        };
    }
    dot_portable
}

/// Integer dot product of a vector's codes with the quantized query (the portable path).
fn dot_codes_portable(codes: &[u8], q: &[i16]) -> i32 {
    codes.iter().zip(q).fold(0i32, |acc, (&c, &x)| {
        acc.wrapping_add(i32::from(c as i8) * i32::from(x))
    })
}

/// AVX2: sixteen codes widened to i16 and multiplied pairwise into eight i32 sums per step.
#[cfg(target_arch = "x86_64")]
#[expect(
    unsafe_code,
    reason = "AVX2 intrinsics; callers check the CPU has them"
)]
#[target_feature(enable = "avx2")]
fn dot_codes_avx2(codes: &[u8], q: &[i16]) -> i32 {
    use std::arch::x86_64::{
        __m128i, __m256i, _mm_loadu_si128, _mm256_add_epi32, _mm256_cvtepi8_epi16,
        _mm256_loadu_si256, _mm256_madd_epi16, _mm256_setzero_si256, _mm256_storeu_si256,
    };
    let n = codes.len().min(q.len());
    let mut acc = [_mm256_setzero_si256(); 2];
    let mut i = 0;
    while i + 32 <= n {
        for (j, lane) in acc.iter_mut().enumerate() {
            let at = i + 16 * j;
            // SAFETY: `at + 16 <= n`, so 16 codes (16 bytes) and 16 query values (32 bytes)
            // are in bounds; `loadu` has no alignment requirement, and AVX2 is enabled.
            let (c, x) = unsafe {
                (
                    _mm_loadu_si128(codes.as_ptr().add(at).cast::<__m128i>()),
                    _mm256_loadu_si256(q.as_ptr().add(at).cast::<__m256i>()),
                )
            };
            *lane = _mm256_add_epi32(*lane, _mm256_madd_epi16(_mm256_cvtepi8_epi16(c), x));
        }
        i += 32;
    }
    let mut lanes = [0i32; 8];
    // SAFETY: `lanes` holds exactly 8 i32 (32 bytes); `storeu` has no alignment requirement.
    unsafe {
        _mm256_storeu_si256(
            lanes.as_mut_ptr().cast::<__m256i>(),
            _mm256_add_epi32(acc[0], acc[1]),
        );
    };
    lanes
        .iter()
        .fold(0i32, |a, &b| a.wrapping_add(b))
        .wrapping_add(dot_codes_portable(&codes[i..n], &q[i..n]))
}

/// Which integer dot product this CPU runs, decided once per scan.
pub(crate) fn dot_codes_fn() -> fn(&[u8], &[i16]) -> i32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        #[expect(
            unsafe_code,
            reason = "calls the SIMD kernel once the CPU is known to have it"
        )]
        return |a, b| {
            // SAFETY: the CPU supports AVX2, checked just above before this function was
            // handed out.
            unsafe { dot_codes_avx2(a, b) }
        };
    }
    dot_codes_portable
}

/// Appends `v` scaled to unit length (zero stays zero): one SIMD dot and one division.
pub(crate) fn extend_unit(out: &mut Vec<f32>, v: &[f32], dot: fn(&[f32], &[f32]) -> f32) {
    let norm = dot(v, v).sqrt();
    let inv = if norm > 0.0 { 1.0 / norm } else { 0.0 };
    out.extend(v.iter().map(|x| x * inv));
}

/// `v` scaled to unit length (zero stays zero).
pub(crate) fn unit(v: &[f32]) -> Vec<f32> {
    let mut out = Vec::with_capacity(v.len());
    extend_unit(&mut out, v, dot_fn());
    out
}

/// Appends the codes of `unit` (a unit-length vector) to `out` and returns their step:
/// component ≈ code × step, the largest component coded ±127 (a zero or non-finite vector
/// gets zero codes and step 0).
pub(crate) fn quantize(out: &mut Vec<u8>, unit: &[f32]) -> f32 {
    let m = unit.iter().fold(0f32, |a, x| a.max(x.abs()));
    if m > 0.0 && m.is_finite() {
        let step = m / 127.0;
        let inv = 1.0 / step;
        out.extend(unit.iter().map(|x| {
            // In [-127, 127] since |x| <= m; the cast cannot truncate, and the byte is
            // the code's two's complement.
            (x * inv).round().clamp(-127.0, 127.0) as i8 as u8
        }));
        step
    } else {
        out.extend(std::iter::repeat_n(0, unit.len()));
        0.0
    }
}

/// Bytes of a vector's entry in vec0's `code` column (schema 7): its `dims` codes, then
/// its step as a little-endian `f32` (to vec0, four more int8 values it never searches).
pub(crate) fn code_width(dims: usize) -> usize {
    dims + 4
}

/// Appends `v`'s entry of vec0's `code` column ([`code_width`] bytes): the codes and step
/// of `v` scaled to unit length, exactly what a quantized block holds for it.
pub(crate) fn encode_code(out: &mut Vec<u8>, v: &[f32]) {
    let step = quantize(out, &unit(v));
    out.extend(step.to_le_bytes());
}

/// The codes and step of a `code` entry ([`encode_code`]); `None` unless it is
/// [`code_width`] bytes with a finite, non-negative step.
pub(crate) fn decode_code(entry: &[u8], dims: usize) -> Option<(&[u8], f32)> {
    let (codes, step) = entry.split_at_checked(dims)?;
    let step = f32::from_le_bytes(<[u8; 4]>::try_from(step).ok()?);
    (step.is_finite() && step >= 0.0).then_some((codes, step))
}

/// Decodes the little-endian floats of `bytes` into `out` (as many as both hold).
pub(crate) fn decode_f32s(out: &mut [f32], bytes: &[u8]) {
    for (x, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_the_naive_sum() {
        // Lengths around the 8- and 32-float steps, so every tail path runs.
        for n in [0, 1, 7, 8, 9, 31, 32, 33, 64, 384, 389] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let naive: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot_fn()(&a, &b) - naive).abs() < 1e-3, "n={n}");
            assert!((dot_portable(&a, &b) - naive).abs() < 1e-3, "n={n}");
        }
    }

    #[test]
    fn integer_dot_matches_the_naive_sum() {
        for n in [0, 1, 15, 16, 17, 31, 32, 33, 48, 384, 389] {
            let c: Vec<u8> = (0..n).map(|i| ((i * 37) % 255) as u8).collect();
            let q: Vec<i16> = (0..n).map(|i| ((i * 7919) % 65_535) as i16).collect();
            let naive: i64 = c
                .iter()
                .zip(&q)
                .map(|(&a, &b)| i64::from(a as i8) * i64::from(b))
                .sum();
            assert_eq!(i64::from(dot_codes_fn()(&c, &q)), naive, "n={n}");
            assert_eq!(i64::from(dot_codes_portable(&c, &q)), naive, "n={n}");
        }
    }
}
