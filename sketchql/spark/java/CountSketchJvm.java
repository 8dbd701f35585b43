/*
 * sketchql: count sketch of one column built inside the JVM (Spark executors).
 *
 * Reproduces sketchql.summaries.hashing / countsketch bit for bit:
 *   code(x): canonical uint64 key code (ints: two's complement; integral
 *            floats: the equal int; other floats: mix(bits ^ GOLDEN), -0.0 -> 0;
 *            floats in [2^63, 2^64): mix(u ^ BIG_TAG); strings/binary:
 *            mix(fnv1a64(utf8 bytes without trailing NULs) ^ STR_TAG))
 *   h      = mix(code + seed * GOLDEN)                 (SplitMix64 finalizer)
 *   z_r    = a_r * h  (a_r = mix(r + (seed ^ 0x51ED5EED) * GOLDEN) | 1)
 *   sign_r = top bit of z_r (0: +1, 1: -1)
 *   bucket = ((z_r >>> 31) & 0xFFFFFFFF) * w >>> 32
 *   C[r][bucket] += sign
 * Null keys (and NaN floats) are skipped and counted, like the mapInArrow path.
 *
 * Each partition fills one long[d*w + 2] (counters, rows, nulls) in a tight
 * loop over Spark's InternalRows (no JVM -> Python transfer); the partials are
 * added with treeAggregate and returned to Python as little-endian bytes:
 *   rows, nulls, partitions, then the d*w counters (row-major).
 * Wrapping int64 addition is what numpy does, so the table is identical.
 */
package sketchql.spark;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Collections;
import java.util.Iterator;

import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.api.java.function.Function2;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

public final class CountSketchJvm {
    public static final String VERSION = "1";

    static final long GOLDEN = 0x9E3779B97F4A7C15L;
    static final long M1 = 0xBF58476D1CE4E5B9L;
    static final long M2 = 0x94D049BB133111EBL;
    static final long FNV_OFFSET = 0xCBF29CE484222325L;
    static final long FNV_PRIME = 0x100000001B3L;
    static final long STR_TAG = 0x5354520000000000L;
    static final long BIG_TAG = 0x4249470000000000L;
    static final long ROW_SEED_TAG = 0x51ED5EEDL;
    static final double TWO63 = 9223372036854775808.0;
    static final double TWO64 = 18446744073709551616.0;

    static final int K_LONG = 0, K_INT = 1, K_SHORT = 2, K_BYTE = 3, K_BOOL = 4,
                     K_DOUBLE = 5, K_FLOAT = 6, K_STRING = 7, K_BINARY = 8;

    private CountSketchJvm() {}

    static long mix(long z) {
        z ^= z >>> 30;
        z *= M1;
        z ^= z >>> 27;
        z *= M2;
        return z ^ (z >>> 31);
    }

    /** Row multipliers a_r (odd), as in countsketch._row_seeds. */
    public static long[] rowMultipliers(long seed, int d) {
        long off = (seed ^ ROW_SEED_TAG) * GOLDEN;
        long[] m = new long[d];
        for (int r = 0; r < d; r++) m[r] = mix(r + off) | 1L;
        return m;
    }

    /** Key kind of a Spark type, or -1 when this class does not hash it. */
    public static int kindOf(DataType t) {
        if (t instanceof LongType) return K_LONG;
        if (t instanceof IntegerType) return K_INT;
        if (t instanceof ShortType) return K_SHORT;
        if (t instanceof ByteType) return K_BYTE;
        if (t instanceof BooleanType) return K_BOOL;
        if (t instanceof DoubleType) return K_DOUBLE;
        if (t instanceof FloatType) return K_FLOAT;
        if (t instanceof StringType) return K_STRING;   // any collation: bytes are hashed as stored
        if (t instanceof BinaryType) return K_BINARY;
        return -1;
    }

    public static boolean supports(DataType t) {
        return kindOf(t) >= 0;
    }

    static long doubleCode(double f) {
        if (!Double.isInfinite(f) && f == Math.floor(f)) {
            if (f >= -TWO63 && f < TWO63) return (long) f;
            if (f >= TWO63 && f < TWO64) return mix(((long) (f - TWO63) | Long.MIN_VALUE) ^ BIG_TAG);
        }
        return mix(Double.doubleToRawLongBits(f + 0.0) ^ GOLDEN);
    }

    static long fnvTail(Object base, long offset, int n) {
        while (n > 0 && Platform.getByte(base, offset + n - 1) == 0) n--;   // numpy drops trailing NULs
        long h = FNV_OFFSET;
        for (int i = 0; i < n; i++) {
            h ^= (Platform.getByte(base, offset + i) & 0xFFL);
            h *= FNV_PRIME;
        }
        return mix(h ^ STR_TAG);
    }

    static long bytesCode(byte[] b) {
        return fnvTail(b, Platform.BYTE_ARRAY_OFFSET, b.length);
    }

    static long stringCode(UTF8String s) {
        return fnvTail(s.getBaseObject(), s.getBaseOffset(), s.numBytes());
    }

    /** Per-partition builder. */
    static final class PartitionBuild implements FlatMapFunction<Iterator<InternalRow>, long[]> {
        private static final long serialVersionUID = 1L;
        final int d, w, kind;
        final long off;
        final long[] mult;

        PartitionBuild(int d, int w, long seed, int kind) {
            this.d = d;
            this.w = w;
            this.kind = kind;
            this.off = seed * GOLDEN;
            this.mult = rowMultipliers(seed, d);
        }

        @Override
        public Iterator<long[]> call(Iterator<InternalRow> it) {
            final int d = this.d, w = this.w, kind = this.kind;
            final long off = this.off, wl = w;
            final long[] mult = this.mult;
            final long[] acc = new long[d * w + 2];
            long rows = 0, nulls = 0;
            while (it.hasNext()) {
                InternalRow row = it.next();
                if (row.isNullAt(0)) {
                    nulls++;
                    continue;
                }
                long code;
                switch (kind) {
                    case K_LONG: code = row.getLong(0); break;
                    case K_INT: code = row.getInt(0); break;
                    case K_SHORT: code = row.getShort(0); break;
                    case K_BYTE: code = row.getByte(0); break;
                    case K_BOOL: code = row.getBoolean(0) ? 1L : 0L; break;
                    case K_DOUBLE: {
                        double f = row.getDouble(0);
                        if (f != f) { nulls++; continue; }
                        code = doubleCode(f);
                        break;
                    }
                    case K_FLOAT: {
                        double f = row.getFloat(0);
                        if (f != f) { nulls++; continue; }
                        code = doubleCode(f);
                        break;
                    }
                    case K_STRING: code = stringCode(row.getUTF8String(0)); break;
                    case K_BINARY: code = bytesCode(row.getBinary(0)); break;
                    default: throw new IllegalStateException("sketchql: unsupported key kind " + kind);
                }
                long h = mix(code + off);
                int base = 0;
                for (int r = 0; r < d; r++, base += w) {
                    long z = h * mult[r];
                    int bucket = (int) ((((z >>> 31) & 0xFFFFFFFFL) * wl) >>> 32);
                    acc[base + bucket] += 1L - ((z >>> 63) << 1);
                }
                rows++;
            }
            acc[d * w] = rows;
            acc[d * w + 1] = nulls;
            return Collections.singletonList(acc).iterator();
        }
    }

    /** Element-wise wrapping sum (in place into a; Spark allows mutating the first argument). */
    static final class AddArrays implements Function2<long[], long[], long[]> {
        private static final long serialVersionUID = 1L;

        @Override
        public long[] call(long[] a, long[] b) {
            for (int i = 0; i < a.length; i++) a[i] += b[i];
            return a;
        }
    }

    /**
     * Build the sketch of column 0 of {@code df} (project the key column first).
     * Returns little-endian bytes: rows, nulls, partitions, d*w counters.
     */
    public static byte[] build(org.apache.spark.sql.classic.Dataset<Row> df, int d, int w, long seed,
                               int depth) {
        DataType t = df.schema().fields()[0].dataType();
        int kind = kindOf(t);
        if (kind < 0) throw new IllegalArgumentException("sketchql: unsupported key type " + t.simpleString());
        if (d < 1 || w < 1 || (long) d * w > Integer.MAX_VALUE - 16)
            throw new IllegalArgumentException("sketchql: sketch shape " + d + "x" + w + " does not fit a JVM array");
        JavaRDD<InternalRow> rdd = df.queryExecution().toRdd().toJavaRDD();
        int parts = rdd.getNumPartitions();
        long[] total = new long[d * w + 2];
        if (parts > 0) {
            JavaRDD<long[]> partials = rdd.mapPartitions(new PartitionBuild(d, w, seed, kind));
            total = partials.treeAggregate(total, new AddArrays(), new AddArrays(), Math.max(1, depth));
        }
        ByteBuffer out = ByteBuffer.allocate(8 * (3 + d * w)).order(ByteOrder.LITTLE_ENDIAN);
        out.putLong(total[d * w]).putLong(total[d * w + 1]).putLong(parts);
        for (int i = 0; i < d * w; i++) out.putLong(total[i]);
        return out.array();
    }
}
