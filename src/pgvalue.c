/* SPDX-License-Identifier: MIT */
/*
 * pgvalue: PostgreSQL values in DataRow wire format, compared, added and
 * averaged as PostgreSQL does (include/pgvalue.h).
 *
 * numeric is handled as decimal digit strings (exact); its binary form is
 * base-10000 digits with a weight, converted both ways. Floats are printed
 * in the shortest form that reads back exactly, with PostgreSQL's choice of
 * plain or exponent notation (plain for decimal exponents -4 to 14, -4 to 5
 * for float4). avg() is numeric_div's result: the scale of
 * select_div_scale (at least 16 significant digits, at least the inputs'
 * scales), rounded half away from zero.
 */
#include "pgvalue.h"
#include "hexdigit.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* numeric digits handled (integer part and fraction each) */
#define DEC_DIGITS_MAX 1000

static uint64_t be(const uint8_t *p, size_t n)
{
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

static void put_be(uint8_t *p, uint64_t v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[n - 1 - i] = (uint8_t)(v >> (8 * i));
}

/* ---- integers ---- */

static bool int_size(uint32_t oid, size_t *n)
{
	switch (oid) {
	case PGVALUE_INT2:
		*n = 2;
		return true;
	case PGVALUE_INT4:
	case PGVALUE_OID:
		*n = 4;
		return true;
	case PGVALUE_INT8:
		*n = 8;
		return true;
	default:
		return false;
	}
}

static bool read_int(uint32_t oid, int16_t format, const uint8_t *p, size_t len, int64_t *out)
{
	size_t n;
	if (!int_size(oid, &n))
		return false;
	if (format == PGVALUE_FORMAT_BINARY) {
		if (len != n)
			return false;
		uint64_t u = be(p, n);
		if (oid == PGVALUE_OID)
			*out = (int64_t)u;
		else if (n == 2)
			*out = (int16_t)u;
		else if (n == 4)
			*out = (int32_t)u;
		else
			*out = (int64_t)u;
		return true;
	}
	char buf[32];
	if (len == 0 || len >= sizeof buf)
		return false;
	memcpy(buf, p, len);
	buf[len] = '\0';
	char *end;
	errno = 0;
	long long v = strtoll(buf, &end, 10);
	if (errno || *end)
		return false;
	*out = v;
	return true;
}

static bool write_int(uint32_t oid, int16_t format, int64_t v, uint8_t *out, size_t cap, size_t *outlen)
{
	size_t n;
	if (!int_size(oid, &n))
		return false;
	if ((oid == PGVALUE_INT2 && (v < INT16_MIN || v > INT16_MAX)) ||
	    (oid == PGVALUE_INT4 && (v < INT32_MIN || v > INT32_MAX)) || (oid == PGVALUE_OID && (v < 0 || v > UINT32_MAX)))
		return false;
	if (format == PGVALUE_FORMAT_BINARY) {
		if (cap < n)
			return false;
		put_be(out, (uint64_t)v, n);
		*outlen = n;
		return true;
	}
	int l = snprintf((char *)out, cap, "%lld", (long long)v);
	if (l < 0 || (size_t)l >= cap)
		return false;
	*outlen = (size_t)l;
	return true;
}

/* ---- floats ---- */

static bool read_float(uint32_t oid, int16_t format, const uint8_t *p, size_t len, double *out)
{
	if (format == PGVALUE_FORMAT_BINARY) {
		if (oid == PGVALUE_FLOAT4 && len == 4) {
			uint32_t u = (uint32_t)be(p, 4);
			float f;
			memcpy(&f, &u, 4);
			*out = f;
			return true;
		}
		if (oid == PGVALUE_FLOAT8 && len == 8) {
			uint64_t u = be(p, 8);
			memcpy(out, &u, 8);
			return true;
		}
		return false;
	}
	char buf[64];
	if (len == 0 || len >= sizeof buf)
		return false;
	memcpy(buf, p, len);
	buf[len] = '\0';
	if (strcmp(buf, "NaN") == 0) {
		*out = NAN;
		return true;
	}
	if (strcmp(buf, "Infinity") == 0 || strcmp(buf, "-Infinity") == 0) {
		*out = buf[0] == '-' ? -INFINITY : INFINITY;
		return true;
	}
	char *end;
	if (oid == PGVALUE_FLOAT4)
		*out = strtof(buf, &end);
	else
		*out = strtod(buf, &end);
	return *end == '\0';
}

/* v in the shortest text that reads back as the same float4/float8, in
 * PostgreSQL's notation. */
static bool format_float(double v, bool is_float4, char *out, size_t cap)
{
	if (isnan(v))
		return snprintf(out, cap, "NaN") < (int)cap;
	if (isinf(v))
		return snprintf(out, cap, v < 0 ? "-Infinity" : "Infinity") < (int)cap;
	if (v == 0)
		return snprintf(out, cap, signbit(v) ? "-0" : "0") < (int)cap;
	char e[40];
	int maxp = is_float4 ? 9 : 17;
	for (int p = 1; p <= maxp; p++) {
		snprintf(e, sizeof e, "%.*e", p - 1, v);
		if (is_float4 ? strtof(e, NULL) == (float)v : strtod(e, NULL) == v)
			break;
	}
	/* e: [-]d[.ddd]e[+-]xx */
	const char *s = e;
	bool neg = *s == '-';
	if (neg)
		s++;
	char digits[24];
	int nd = 0;
	for (; *s && *s != 'e'; s++)
		if (isdigit((unsigned char)*s) && nd < (int)sizeof digits - 1)
			digits[nd++] = *s;
	digits[nd] = '\0';
	int exp = *s == 'e' ? atoi(s + 1) : 0;
	if (exp < -4 || exp >= (is_float4 ? 6 : 15))
		return snprintf(out, cap, "%s", e) < (int)cap;   /* C's %e is PostgreSQL's exponent form */
	size_t o = 0;
	char buf[64];
	if (neg)
		buf[o++] = '-';
	if (exp < 0) {
		buf[o++] = '0';
		buf[o++] = '.';
		for (int i = 0; i < -exp - 1; i++)
			buf[o++] = '0';
		for (int i = 0; i < nd; i++)
			buf[o++] = digits[i];
	} else {
		for (int i = 0; i <= exp; i++)
			buf[o++] = i < nd ? digits[i] : '0';
		if (nd > exp + 1) {
			buf[o++] = '.';
			for (int i = exp + 1; i < nd; i++)
				buf[o++] = digits[i];
		}
	}
	buf[o] = '\0';
	return snprintf(out, cap, "%s", buf) < (int)cap;
}

static bool write_float(uint32_t oid, int16_t format, double v, uint8_t *out, size_t cap, size_t *outlen)
{
	bool f4 = oid == PGVALUE_FLOAT4;
	if (format == PGVALUE_FORMAT_BINARY) {
		size_t n = f4 ? 4 : 8;
		if (cap < n)
			return false;
		if (f4) {
			float f = (float)v;
			uint32_t u;
			memcpy(&u, &f, 4);
			put_be(out, u, 4);
		} else {
			uint64_t u;
			memcpy(&u, &v, 8);
			put_be(out, u, 8);
		}
		*outlen = n;
		return true;
	}
	if (!format_float(f4 ? (double)(float)v : v, f4, (char *)out, cap))
		return false;
	*outlen = strlen((const char *)out);
	return true;
}

static int cmp_double(double a, double b)
{
	/* NaN above everything and equal to itself, as PostgreSQL's btree */
	if (isnan(a))
		return isnan(b) ? 0 : 1;
	if (isnan(b))
		return -1;
	return a < b ? -1 : a > b;
}

/* ---- numeric ---- */

enum dec_kind { DEC_NUM, DEC_NAN, DEC_PINF, DEC_NINF };

struct dec {
	enum dec_kind kind;
	bool neg;
	int ni, nf;                    /* digits in the integer part (no leading zeros), in the fraction (= dscale) */
	char ip[DEC_DIGITS_MAX + 8];
	char fp[DEC_DIGITS_MAX + 8];
};

static bool dec_is_zero(const struct dec *d)
{
	if (d->ni)
		return false;
	for (int i = 0; i < d->nf; i++)
		if (d->fp[i] != '0')
			return false;
	return true;
}

static bool dec_from_text(const uint8_t *p, size_t len, struct dec *d)
{
	memset(d, 0, offsetof(struct dec, ip));
	if (len == 3 && memcmp(p, "NaN", 3) == 0) {
		d->kind = DEC_NAN;
		return true;
	}
	if (len == 8 && memcmp(p, "Infinity", 8) == 0) {
		d->kind = DEC_PINF;
		return true;
	}
	if (len == 9 && memcmp(p, "-Infinity", 9) == 0) {
		d->kind = DEC_NINF;
		return true;
	}
	size_t i = 0;
	if (i < len && (p[i] == '-' || p[i] == '+'))
		d->neg = p[i++] == '-';
	bool any = false;
	while (i < len && p[i] == '0') {
		i++;
		any = true;
	}
	while (i < len && isdigit(p[i])) {
		if (d->ni >= DEC_DIGITS_MAX)
			return false;
		d->ip[d->ni++] = (char)p[i++];
		any = true;
	}
	if (i < len && p[i] == '.') {
		i++;
		while (i < len && isdigit(p[i])) {
			if (d->nf >= DEC_DIGITS_MAX)
				return false;
			d->fp[d->nf++] = (char)p[i++];
			any = true;
		}
	}
	if (!any || i != len)
		return false;
	if (dec_is_zero(d))
		d->neg = false;
	return true;
}

static bool dec_from_int(int64_t v, struct dec *d)
{
	char buf[32];
	int l = snprintf(buf, sizeof buf, "%lld", (long long)v);
	return dec_from_text((const uint8_t *)buf, (size_t)l, d);
}

static bool dec_from_binary(const uint8_t *p, size_t len, struct dec *d)
{
	memset(d, 0, offsetof(struct dec, ip));
	if (len < 8)
		return false;
	int ndigits = (int)be(p, 2);
	int weight = (int16_t)be(p + 2, 2);
	uint16_t sign = (uint16_t)be(p + 4, 2);
	int dscale = (int)be(p + 6, 2);
	if (len != 8 + 2 * (size_t)ndigits)
		return false;
	switch (sign) {
	case 0xC000:
		d->kind = DEC_NAN;
		return true;
	case 0xD000:
		d->kind = DEC_PINF;
		return true;
	case 0xF000:
		d->kind = DEC_NINF;
		return true;
	case 0x0000:
	case 0x4000:
		break;
	default:
		return false;
	}
	d->neg = sign == 0x4000;
	if (dscale > DEC_DIGITS_MAX || (weight + 1) * 4 > DEC_DIGITS_MAX || weight < -DEC_DIGITS_MAX)
		return false;
	/* integer groups: powers weight .. 0 */
	for (int pw = weight; pw >= 0; pw--) {
		int i = weight - pw;
		unsigned g = i < ndigits ? (unsigned)be(p + 8 + 2 * i, 2) : 0;
		if (g > 9999)
			return false;
		char four[5];
		snprintf(four, sizeof four, "%04u", g);
		for (int k = 0; k < 4; k++) {
			if (d->ni == 0 && four[k] == '0')
				continue;
			d->ip[d->ni++] = four[k];
		}
	}
	/* fraction groups: powers -1, -2, ... as far as dscale */
	for (int pw = -1; d->nf < dscale; pw--) {
		int i = weight - pw;
		unsigned g = i >= 0 && i < ndigits ? (unsigned)be(p + 8 + 2 * i, 2) : 0;
		if (g > 9999)
			return false;
		char four[5];
		snprintf(four, sizeof four, "%04u", g);
		for (int k = 0; k < 4 && d->nf < dscale; k++)
			d->fp[d->nf++] = four[k];
	}
	if (dec_is_zero(d))
		d->neg = false;
	return true;
}

static bool dec_read(int16_t format, const uint8_t *p, size_t len, struct dec *d)
{
	return format == PGVALUE_FORMAT_BINARY ? dec_from_binary(p, len, d) : dec_from_text(p, len, d);
}

static bool dec_write(const struct dec *d, int16_t format, uint8_t *out, size_t cap, size_t *outlen)
{
	if (format != PGVALUE_FORMAT_BINARY) {
		const char *special = d->kind == DEC_NAN ? "NaN" : d->kind == DEC_PINF ? "Infinity"
								 : d->kind == DEC_NINF ? "-Infinity" : NULL;
		size_t o = 0;
		if (special) {
			o = strlen(special);
			if (o >= cap)
				return false;
			memcpy(out, special, o);
			*outlen = o;
			return true;
		}
		if ((size_t)d->ni + (size_t)d->nf + 4 > cap)
			return false;
		if (d->neg)
			out[o++] = '-';
		if (d->ni) {
			memcpy(out + o, d->ip, (size_t)d->ni);
			o += (size_t)d->ni;
		} else {
			out[o++] = '0';
		}
		if (d->nf) {
			out[o++] = '.';
			memcpy(out + o, d->fp, (size_t)d->nf);
			o += (size_t)d->nf;
		}
		*outlen = o;
		return true;
	}
	uint16_t sign = d->kind == DEC_NAN ? 0xC000 : d->kind == DEC_PINF ? 0xD000 : d->kind == DEC_NINF ? 0xF000
													   : d->neg ? 0x4000 : 0;
	/* base-10000 groups: the integer part padded on the left, the fraction on the right */
	int ig = (d->ni + 3) / 4, fg = (d->nf + 3) / 4, n = ig + fg;
	uint16_t g[2 * (DEC_DIGITS_MAX / 4 + 2)];
	for (int i = 0; i < ig; i++) {
		unsigned v = 0;
		for (int k = 0; k < 4; k++) {
			int pos = i * 4 + k - (ig * 4 - d->ni);   /* digit index in ip */
			v = v * 10 + (pos >= 0 ? (unsigned)(d->ip[pos] - '0') : 0);
		}
		g[i] = (uint16_t)v;
	}
	for (int i = 0; i < fg; i++) {
		unsigned v = 0;
		for (int k = 0; k < 4; k++) {
			int pos = i * 4 + k;
			v = v * 10 + (pos < d->nf ? (unsigned)(d->fp[pos] - '0') : 0);
		}
		g[ig + i] = (uint16_t)v;
	}
	int first = 0, last = n - 1, weight = ig - 1;
	if (d->kind != DEC_NUM)
		n = 0;
	while (first < n && g[first] == 0) {
		first++;
		weight--;
	}
	while (last >= first && g[last] == 0)
		last--;
	int nd = d->kind == DEC_NUM && last >= first ? last - first + 1 : 0;
	if (nd == 0)
		weight = 0;
	size_t need = 8 + 2 * (size_t)nd;
	if (need > cap)
		return false;
	put_be(out, (uint64_t)nd, 2);
	put_be(out + 2, (uint16_t)(int16_t)weight, 2);
	put_be(out + 4, sign, 2);
	put_be(out + 6, (uint64_t)(d->kind == DEC_NUM ? d->nf : 0), 2);
	for (int i = 0; i < nd; i++)
		put_be(out + 8 + 2 * i, g[first + i], 2);
	*outlen = need;
	return true;
}

/* |a| vs |b| */
static int dec_cmp_abs(const struct dec *a, const struct dec *b)
{
	if (a->ni != b->ni)
		return a->ni < b->ni ? -1 : 1;
	int c = memcmp(a->ip, b->ip, (size_t)a->ni);
	if (c)
		return c < 0 ? -1 : 1;
	int n = a->nf > b->nf ? a->nf : b->nf;
	for (int i = 0; i < n; i++) {
		char x = i < a->nf ? a->fp[i] : '0', y = i < b->nf ? b->fp[i] : '0';
		if (x != y)
			return x < y ? -1 : 1;
	}
	return 0;
}

static int dec_rank(const struct dec *d)
{
	return d->kind == DEC_NAN ? 2 : d->kind == DEC_PINF ? 1 : d->kind == DEC_NINF ? -1 : 0;
}

static int dec_cmp(const struct dec *a, const struct dec *b)
{
	int ra = dec_rank(a), rb = dec_rank(b);
	if (ra || rb)
		return ra < rb ? -1 : ra > rb;
	if (a->neg != b->neg)
		return a->neg ? -1 : 1;
	int c = dec_cmp_abs(a, b);
	return a->neg ? -c : c;
}

/* r = a + b (kinds DEC_NUM); r may not alias. */
static bool dec_add(const struct dec *a, const struct dec *b, struct dec *r)
{
	memset(r, 0, offsetof(struct dec, ip));
	if (a->kind != DEC_NUM || b->kind != DEC_NUM) {
		bool pa = a->kind == DEC_PINF || b->kind == DEC_PINF, na = a->kind == DEC_NINF || b->kind == DEC_NINF;
		r->kind = a->kind == DEC_NAN || b->kind == DEC_NAN || (pa && na) ? DEC_NAN : pa ? DEC_PINF : DEC_NINF;
		return true;
	}
	int nf = a->nf > b->nf ? a->nf : b->nf;
	int ni = (a->ni > b->ni ? a->ni : b->ni) + 1;
	if (ni > DEC_DIGITS_MAX + 1)
		return false;
	/* digits as one aligned integer: ni integer places, nf fraction places */
	int total = ni + nf;
	signed char x[2 * DEC_DIGITS_MAX + 16], y[2 * DEC_DIGITS_MAX + 16], z[2 * DEC_DIGITS_MAX + 16];
	for (int i = 0; i < total; i++) {
		int ip_pos_a = i - (ni - a->ni), ip_pos_b = i - (ni - b->ni);
		if (i < ni) {
			x[i] = (signed char)(ip_pos_a >= 0 ? a->ip[ip_pos_a] - '0' : 0);
			y[i] = (signed char)(ip_pos_b >= 0 ? b->ip[ip_pos_b] - '0' : 0);
		} else {
			int f = i - ni;
			x[i] = (signed char)(f < a->nf ? a->fp[f] - '0' : 0);
			y[i] = (signed char)(f < b->nf ? b->fp[f] - '0' : 0);
		}
	}
	bool neg;
	if (a->neg == b->neg) {
		int carry = 0;
		for (int i = total - 1; i >= 0; i--) {
			int s = x[i] + y[i] + carry;
			z[i] = (signed char)(s % 10);
			carry = s / 10;
		}
		neg = a->neg;
	} else {
		/* larger magnitude minus smaller */
		int c = dec_cmp_abs(a, b);
		const signed char *big = c >= 0 ? x : y, *small = c >= 0 ? y : x;
		neg = c >= 0 ? a->neg : b->neg;
		int borrow = 0;
		for (int i = total - 1; i >= 0; i--) {
			int s = big[i] - small[i] - borrow;
			borrow = s < 0;
			z[i] = (signed char)(s < 0 ? s + 10 : s);
		}
	}
	int k = 0;
	while (k < ni && z[k] == 0)
		k++;
	for (int i = k; i < ni; i++)
		r->ip[r->ni++] = (char)('0' + z[i]);
	for (int i = 0; i < nf; i++)
		r->fp[r->nf++] = (char)('0' + z[ni + i]);
	r->neg = neg && !dec_is_zero(r);
	return true;
}

/* Weight and first digit in base 10000, as numeric.c's select_div_scale
 * reads them (0, 0 for zero). */
static void dec_weight(const struct dec *d, int *weight, int *first)
{
	*weight = 0;
	*first = 0;
	if (d->ni) {
		*weight = (d->ni - 1) / 4;
		int lead = d->ni - *weight * 4;   /* digits in the first group */
		int v = 0;
		for (int i = 0; i < lead; i++)
			v = v * 10 + (d->ip[i] - '0');
		*first = v;
		return;
	}
	for (int g = 0; g * 4 < d->nf; g++) {
		int v = 0;
		for (int k = 0; k < 4; k++) {
			int pos = g * 4 + k;
			v = v * 10 + (pos < d->nf ? d->fp[pos] - '0' : 0);
		}
		if (v) {
			*weight = -(g + 1);
			*first = v;
			return;
		}
	}
}

/* r = a / count, at PostgreSQL's numeric_div scale, rounded half away
 * from zero. */
static bool dec_div_count(const struct dec *a, int64_t count, struct dec *r)
{
	memset(r, 0, offsetof(struct dec, ip));
	if (count <= 0)
		return false;
	if (a->kind != DEC_NUM) {
		r->kind = a->kind;
		return true;
	}
	struct dec c;
	if (!dec_from_int(count, &c))
		return false;
	int w1, f1, w2, f2;
	dec_weight(a, &w1, &f1);
	dec_weight(&c, &w2, &f2);
	int qweight = w1 - w2;
	if (f1 <= f2)
		qweight--;
	int rscale = 16 - qweight * 4;
	if (rscale < a->nf)
		rscale = a->nf;
	if (rscale < 0)
		rscale = 0;
	if (rscale > 1000)
		rscale = 1000;
	if (rscale > DEC_DIGITS_MAX - 1)
		return false;
	/* long division of the digits (integer part, then the fraction and
	 * zeros up to rscale + 1 places) by count */
	unsigned __int128 rem = 0;
	char q[2 * DEC_DIGITS_MAX + 16];
	int nq = 0;
	for (int i = 0; i < a->ni; i++) {
		rem = rem * 10 + (unsigned)(a->ip[i] - '0');
		q[nq++] = (char)('0' + (int)(rem / (uint64_t)count));
		rem %= (uint64_t)count;
	}
	int int_digits = nq;
	for (int i = 0; i < rscale + 1; i++) {
		rem = rem * 10 + (unsigned)(i < a->nf ? a->fp[i] - '0' : 0);
		q[nq++] = (char)('0' + (int)(rem / (uint64_t)count));
		rem %= (uint64_t)count;
	}
	/* round at rscale: the next digit decides (half away from zero) */
	bool up = q[nq - 1] >= '5';
	nq--;
	for (int i = nq - 1; up && i >= 0; i--) {
		if (q[i] == '9') {
			q[i] = '0';
		} else {
			q[i]++;
			up = false;
		}
	}
	int k = 0;
	if (up)
		r->ip[r->ni++] = '1';   /* 99.9... rounded up */
	while (!up && k < int_digits && q[k] == '0')
		k++;
	for (int i = k; i < int_digits; i++)
		r->ip[r->ni++] = q[i];
	for (int i = int_digits; i < nq; i++)
		r->fp[r->nf++] = q[i];
	r->neg = a->neg && !dec_is_zero(r);
	return true;
}

/* ---- dates and times ---- */

/* Days since 1970-01-01 of a proleptic Gregorian date (astronomical year). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

static bool read_num(const char **s, const char *e, int min_digits, int max_digits, int64_t *v)
{
	int n = 0;
	*v = 0;
	while (*s < e && isdigit((unsigned char)**s) && n < max_digits) {
		*v = *v * 10 + (**s - '0');
		(*s)++;
		n++;
	}
	return n >= min_digits;
}

/* A date or timestamp in DateStyle ISO text: days (date) or microseconds
 * (timestamp; the offset applied for timestamptz) since 2000-01-01;
 * ±infinity as INT64_MIN/INT64_MAX. */
static bool read_time_text(const uint8_t *p, size_t len, bool has_time, int64_t *out)
{
	const char *s = (const char *)p, *e = s + len;
	if (len == 8 && memcmp(s, "infinity", 8) == 0) {
		*out = INT64_MAX;
		return true;
	}
	if (len == 9 && memcmp(s, "-infinity", 9) == 0) {
		*out = INT64_MIN;
		return true;
	}
	bool bc = len > 3 && memcmp(e - 3, " BC", 3) == 0;
	if (bc)
		e -= 3;
	int64_t y, mo, d, h = 0, mi = 0, sec = 0, us = 0;
	if (!read_num(&s, e, 4, 7, &y) || s >= e || *s++ != '-' || !read_num(&s, e, 2, 2, &mo) || s >= e ||
	    *s++ != '-' || !read_num(&s, e, 2, 2, &d))
		return false;
	if (has_time) {
		if (s >= e || *s++ != ' ' || !read_num(&s, e, 2, 2, &h) || s >= e || *s++ != ':' ||
		    !read_num(&s, e, 2, 2, &mi) || s >= e || *s++ != ':' || !read_num(&s, e, 2, 2, &sec))
			return false;
		if (s < e && *s == '.') {
			s++;
			int n = 0;
			while (s < e && isdigit((unsigned char)*s) && n < 6) {
				us = us * 10 + (*s++ - '0');
				n++;
			}
			while (n++ < 6)
				us *= 10;
		}
		if (s < e && (*s == '+' || *s == '-')) {
			int sign = *s++ == '-' ? -1 : 1;
			int64_t oh, om = 0, os = 0;
			if (!read_num(&s, e, 2, 2, &oh))
				return false;
			if (s < e && *s == ':') {
				s++;
				if (!read_num(&s, e, 2, 2, &om))
					return false;
				if (s < e && *s == ':') {
					s++;
					if (!read_num(&s, e, 2, 2, &os))
						return false;
				}
			}
			/* local = UTC + offset: UTC = local - offset */
			sec -= sign * (oh * 3600 + om * 60 + os);
		}
	}
	if (s != e || mo < 1 || mo > 12 || d < 1 || d > 31)
		return false;
	if (bc)
		y = 1 - y;
	/* days since 2000-01-01, as PostgreSQL counts; a date stays in days */
	int64_t days = days_from_civil(y, (int)mo, (int)d) - 10957, t;
	if (!has_time) {
		*out = days;
		return true;
	}
	if (__builtin_mul_overflow(days, (int64_t)86400, &t) || __builtin_add_overflow(t, h * 3600 + mi * 60 + sec, &t) ||
	    __builtin_mul_overflow(t, (int64_t)1000000, &t) || __builtin_add_overflow(t, us, &t))
		return false;
	*out = t;
	return true;
}

/* ---- strings ---- */

static int cmp_bytes(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
	int c = memcmp(a, b, al < bl ? al : bl);
	if (c)
		return c < 0 ? -1 : 1;
	return al < bl ? -1 : al > bl;
}

static bool cmp_strings(const uint8_t *a, size_t al, const uint8_t *b, size_t bl, locale_t coll, int *out)
{
	int bytes = cmp_bytes(a, al, b, bl);
	if (!coll || bytes == 0) {
		*out = bytes;
		return true;
	}
	char sa[256], sb[256];
	char *xa = al < sizeof sa ? sa : malloc(al + 1), *xb = bl < sizeof sb ? sb : malloc(bl + 1);
	bool ok = xa && xb && !memchr(a, 0, al) && !memchr(b, 0, bl);
	if (ok) {
		memcpy(xa, a, al);
		xa[al] = '\0';
		memcpy(xb, b, bl);
		xb[bl] = '\0';
		int c = strcoll_l(xa, xb, coll);
		/* equal by the collation: bytes decide, as in PostgreSQL */
		*out = c ? (c < 0 ? -1 : 1) : bytes;
	}
	if (xa != sa)
		free(xa);
	if (xb != sb)
		free(xb);
	return ok;
}

static size_t bpchar_len(const uint8_t *p, size_t len)
{
	while (len > 0 && p[len - 1] == ' ')
		len--;
	return len;
}

static bool uuid_bytes(int16_t format, const uint8_t *p, size_t len, uint8_t out[16])
{
	if (format == PGVALUE_FORMAT_BINARY) {
		if (len != 16)
			return false;
		memcpy(out, p, 16);
		return true;
	}
	int n = 0;
	for (size_t i = 0; i < len; i++) {
		if (p[i] == '-' || p[i] == '{' || p[i] == '}')
			continue;
		int h = hex_digit_value((unsigned char)p[i]);
		if (h < 0 || n == 32)
			return false;
		if (n % 2 == 0)
			out[n / 2] = (uint8_t)(h << 4);
		else
			out[n / 2] |= (uint8_t)h;
		n++;
	}
	return n == 32;
}

/* ---- the interface ---- */

bool pgvalue_can_compare(uint32_t oid, int16_t format)
{
	if (format != PGVALUE_FORMAT_TEXT && format != PGVALUE_FORMAT_BINARY)
		return false;
	switch (oid) {
	case PGVALUE_BOOL:
	case PGVALUE_NAME:
	case PGVALUE_INT8:
	case PGVALUE_INT2:
	case PGVALUE_INT4:
	case PGVALUE_TEXT:
	case PGVALUE_OID:
	case PGVALUE_FLOAT4:
	case PGVALUE_FLOAT8:
	case PGVALUE_BPCHAR:
	case PGVALUE_VARCHAR:
	case PGVALUE_DATE:
	case PGVALUE_TIMESTAMP:
	case PGVALUE_TIMESTAMPTZ:
	case PGVALUE_NUMERIC:
	case PGVALUE_UUID:
		return true;
	default:
		return false;
	}
}

bool pgvalue_compare(uint32_t oid, int16_t format, const uint8_t *a, size_t alen, const uint8_t *b, size_t blen,
		     locale_t coll, int *cmp)
{
	if (!pgvalue_can_compare(oid, format))
		return false;
	bool bin = format == PGVALUE_FORMAT_BINARY;
	switch (oid) {
	case PGVALUE_INT2:
	case PGVALUE_INT4:
	case PGVALUE_INT8:
	case PGVALUE_OID: {
		int64_t x, y;
		if (!read_int(oid, format, a, alen, &x) || !read_int(oid, format, b, blen, &y))
			return false;
		*cmp = x < y ? -1 : x > y;
		return true;
	}
	case PGVALUE_FLOAT4:
	case PGVALUE_FLOAT8: {
		double x, y;
		if (!read_float(oid, format, a, alen, &x) || !read_float(oid, format, b, blen, &y))
			return false;
		*cmp = cmp_double(x, y);
		return true;
	}
	case PGVALUE_NUMERIC: {
		struct dec *x = malloc(2 * sizeof *x);
		if (!x)
			return false;
		bool ok = dec_read(format, a, alen, &x[0]) && dec_read(format, b, blen, &x[1]);
		if (ok)
			*cmp = dec_cmp(&x[0], &x[1]);
		free(x);
		return ok;
	}
	case PGVALUE_BOOL: {
		int x, y;
		if (alen != 1 || blen != 1)
			return false;
		x = bin ? a[0] != 0 : a[0] == 't';
		y = bin ? b[0] != 0 : b[0] == 't';
		*cmp = x < y ? -1 : x > y;
		return true;
	}
	case PGVALUE_UUID: {
		uint8_t x[16], y[16];
		if (!uuid_bytes(format, a, alen, x) || !uuid_bytes(format, b, blen, y))
			return false;
		*cmp = cmp_bytes(x, 16, y, 16);
		return true;
	}
	case PGVALUE_DATE:
	case PGVALUE_TIMESTAMP:
	case PGVALUE_TIMESTAMPTZ: {
		int64_t x, y;
		if (bin) {
			size_t n = oid == PGVALUE_DATE ? 4 : 8;
			if (alen != n || blen != n)
				return false;
			x = n == 4 ? (int32_t)be(a, 4) : (int64_t)be(a, 8);
			y = n == 4 ? (int32_t)be(b, 4) : (int64_t)be(b, 8);
		} else if (!read_time_text(a, alen, oid != PGVALUE_DATE, &x) ||
			   !read_time_text(b, blen, oid != PGVALUE_DATE, &y)) {
			return false;
		}
		*cmp = x < y ? -1 : x > y;
		return true;
	}
	case PGVALUE_NAME:
		*cmp = cmp_bytes(a, alen, b, blen);   /* name sorts in the C collation */
		return true;
	case PGVALUE_BPCHAR:
		return cmp_strings(a, bpchar_len(a, alen), b, bpchar_len(b, blen), coll, cmp);
	default:
		return cmp_strings(a, alen, b, blen, coll, cmp);
	}
}

bool pgvalue_can_add(uint32_t oid, int16_t format)
{
	if (format != PGVALUE_FORMAT_TEXT && format != PGVALUE_FORMAT_BINARY)
		return false;
	return oid == PGVALUE_INT2 || oid == PGVALUE_INT4 || oid == PGVALUE_INT8 || oid == PGVALUE_NUMERIC ||
	       oid == PGVALUE_FLOAT4 || oid == PGVALUE_FLOAT8;
}

bool pgvalue_add(uint32_t oid, int16_t format, const uint8_t *a, size_t alen, const uint8_t *b, size_t blen,
		 uint8_t *out, size_t cap, size_t *outlen)
{
	if (!pgvalue_can_add(oid, format))
		return false;
	switch (oid) {
	case PGVALUE_FLOAT4:
	case PGVALUE_FLOAT8: {
		double x, y;
		if (!read_float(oid, format, a, alen, &x) || !read_float(oid, format, b, blen, &y))
			return false;
		return write_float(oid, format, oid == PGVALUE_FLOAT4 ? (double)((float)x + (float)y) : x + y, out, cap,
				   outlen);
	}
	case PGVALUE_NUMERIC: {
		struct dec *d = malloc(3 * sizeof *d);
		if (!d)
			return false;
		bool ok = dec_read(format, a, alen, &d[0]) && dec_read(format, b, blen, &d[1]) &&
			  dec_add(&d[0], &d[1], &d[2]) && dec_write(&d[2], format, out, cap, outlen);
		free(d);
		return ok;
	}
	default: {
		int64_t x, y, z;
		if (!read_int(oid, format, a, alen, &x) || !read_int(oid, format, b, blen, &y) ||
		    __builtin_add_overflow(x, y, &z))
			return false;
		return write_int(oid, format, z, out, cap, outlen);
	}
	}
}

bool pgvalue_avg(uint32_t avg_oid, int16_t avg_format, uint32_t sum_oid, int16_t sum_format, const uint8_t *sum,
		 size_t sumlen, int64_t count, uint8_t *out, size_t cap, size_t *outlen)
{
	if (count <= 0)
		return false;
	if (avg_oid == PGVALUE_FLOAT8) {
		double s;
		if ((sum_oid != PGVALUE_FLOAT8 && sum_oid != PGVALUE_FLOAT4) || !read_float(sum_oid, sum_format, sum, sumlen, &s))
			return false;
		return write_float(PGVALUE_FLOAT8, avg_format, s / (double)count, out, cap, outlen);
	}
	if (avg_oid != PGVALUE_NUMERIC)
		return false;
	struct dec *d = malloc(2 * sizeof *d);
	if (!d)
		return false;
	bool ok;
	if (sum_oid == PGVALUE_NUMERIC) {
		ok = dec_read(sum_format, sum, sumlen, &d[0]);
	} else {
		int64_t v;
		ok = read_int(sum_oid, sum_format, sum, sumlen, &v) && dec_from_int(v, &d[0]);
	}
	ok = ok && dec_div_count(&d[0], count, &d[1]) && dec_write(&d[1], avg_format, out, cap, outlen);
	free(d);
	return ok;
}
