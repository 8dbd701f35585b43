/*
 * sketchql: the rows an index build must ingest, selected inside the JVM.
 *
 * Input: a Dataset projected to (key, ts) or (key, ts, row id).  Every row is
 * read as the mapInArrow path reads it:
 *
 *   - a null key (or NaN float key) is counted in nullKeys, else a null (or NaN)
 *     time in nullTs; the other rows are "valid";
 *   - the time becomes float64 seconds as sketchql.spark.partition.seconds_array
 *     computes it: numbers (double) x; TIMESTAMP / TIMESTAMP_NTZ micros / 1e6;
 *     DATE days * 86400.0 (the same IEEE operations, hence the same doubles);
 *   - the row id is the given column (null -> -1) or, when generated,
 *     (partition << 33) + base + position -- Spark's monotonically_increasing_id()
 *     (+ base) of the same partition, null rows included.
 *
 * A valid row with ts <= hi - margin, hi the newest valid time, is expired at
 * the merged clock (see index_jvm.py) and need not be ingested.  Two modes:
 *
 *   prune:    job 1 (NewestTime) finds the global hi; job 2 (PartitionRows)
 *             keeps the valid rows with ts > hi - margin (the "floor");
 *   no prune: one job; each partition drops ts <= hi_p - margin, hi_p its own
 *             newest time (the merged clock is >= hi_p).  The running maximum
 *             only grows, so a row with ts <= (running hi_p) - margin is dropped
 *             on arrival and the buffer is compacted against the running cut
 *             whenever it fills (amortized O(1) per row).
 *
 * A non-finite valid time disables all pruning (the ingest then reports it).
 * The driver writes, little-endian, to {@code path}:
 *
 *   header (8 longs): partitions, valid rows, nullKeys, nullTs, kept rows,
 *                     largest row id of a valid row (-1: none), non-finite times,
 *                     0 (reserved)
 *   2 doubles:        min and max valid time (NaN when none)
 *   kept x long:      keys (integers / booleans as long, floats as double bits)
 *   kept x double:    times
 *   kept x long:      row ids
 *
 * Rows keep partition order, and within a partition arrival order; Python sorts
 * by (ts, row id) when needed and ingests.
 */
package sketchql.spark;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.util.Arrays;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;

import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.api.java.function.Function2;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DateType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;

public final class IndexRowsJvm {
    public static final String VERSION = "1";

    static final int K_LONG = 0, K_INT = 1, K_SHORT = 2, K_BYTE = 3, K_BOOL = 4, K_DOUBLE = 5, K_FLOAT = 6;
    static final int T_LONG = 0, T_INT = 1, T_SHORT = 2, T_BYTE = 3, T_DOUBLE = 5, T_FLOAT = 6,
                     T_MICROS = 7, T_DAYS = 8;
    static final int HEADER = 8 * 8 + 2 * 8;
    static final int PART_HEADER = 6 * 8 + 2 * 8;

    private IndexRowsJvm() {}

    /** Key kind of a Spark type, or -1 when keys of that type are not read here. */
    public static int keyKind(DataType t) {
        if (t instanceof LongType) return K_LONG;
        if (t instanceof IntegerType) return K_INT;
        if (t instanceof ShortType) return K_SHORT;
        if (t instanceof ByteType) return K_BYTE;
        if (t instanceof BooleanType) return K_BOOL;
        if (t instanceof DoubleType) return K_DOUBLE;
        if (t instanceof FloatType) return K_FLOAT;
        return -1;
    }

    /** Time kind of a Spark type, or -1. */
    public static int timeKind(DataType t) {
        if (t instanceof LongType) return T_LONG;
        if (t instanceof IntegerType) return T_INT;
        if (t instanceof ShortType) return T_SHORT;
        if (t instanceof ByteType) return T_BYTE;
        if (t instanceof DoubleType) return T_DOUBLE;
        if (t instanceof FloatType) return T_FLOAT;
        if (t instanceof TimestampType || t instanceof TimestampNTZType) return T_MICROS;
        if (t instanceof DateType) return T_DAYS;
        return -1;
    }

    /** Row-id kind (integers only), or -1. */
    public static int ridKind(DataType t) {
        int k = keyKind(t);
        return k >= K_LONG && k <= K_BYTE ? k : -1;
    }

    static long intAt(InternalRow row, int col, int kind) {
        switch (kind) {
            case K_LONG: return row.getLong(col);
            case K_INT: return row.getInt(col);
            case K_SHORT: return row.getShort(col);
            case K_BYTE: return row.getByte(col);
            default: throw new IllegalStateException("sketchql: not an integer kind " + kind);
        }
    }

    static final int VALID = 0, NULL_KEY = 1, NULL_TS = 2;

    /** Reads (key, ts) of a row as the mapInArrow path does; see the class comment. */
    static final class Reader implements java.io.Serializable {
        private static final long serialVersionUID = 1L;
        final int keyKind, timeKind;
        long key;
        double t;

        Reader(int keyKind, int timeKind) {
            this.keyKind = keyKind;
            this.timeKind = timeKind;
        }

        int read(InternalRow row) {
            if (row.isNullAt(0)) return NULL_KEY;
            final int kk = keyKind;
            if (kk == K_DOUBLE || kk == K_FLOAT) {
                double f = kk == K_DOUBLE ? row.getDouble(0) : (double) row.getFloat(0);
                if (f != f) return NULL_KEY;
                key = Double.doubleToRawLongBits(f);
            } else if (kk == K_BOOL) {
                key = row.getBoolean(0) ? 1L : 0L;
            } else {
                key = intAt(row, 0, kk);
            }
            if (row.isNullAt(1)) return NULL_TS;
            double x;
            switch (timeKind) {
                case T_DOUBLE: x = row.getDouble(1); break;
                case T_FLOAT: x = row.getFloat(1); break;
                case T_MICROS: x = (double) row.getLong(1) / 1e6; break;
                case T_DAYS: x = (double) row.getInt(1) * 86400.0; break;
                default: x = (double) intAt(row, 1, timeKind); break;
            }
            if (x != x) return NULL_TS;
            t = x;
            return VALID;
        }
    }

    /** Job 1 of the prune mode: {newest valid time (-inf: none), non-finite valid times} per partition. */
    static final class NewestTime implements FlatMapFunction<Iterator<InternalRow>, double[]> {
        private static final long serialVersionUID = 1L;
        final int keyKind, timeKind;

        NewestTime(int keyKind, int timeKind) {
            this.keyKind = keyKind;
            this.timeKind = timeKind;
        }

        @Override
        public Iterator<double[]> call(Iterator<InternalRow> it) {
            final Reader rd = new Reader(keyKind, timeKind);
            double hi = Double.NEGATIVE_INFINITY, nonFinite = 0;
            while (it.hasNext()) {
                if (rd.read(it.next()) != VALID) continue;
                double t = rd.t;
                if (t > hi) hi = t;
                if (Double.isInfinite(t)) nonFinite++;
            }
            return Collections.singletonList(new double[] {hi, nonFinite}).iterator();
        }
    }

    /** Growable columns of the kept rows of one partition. */
    static final class Buf {
        long[] keys = new long[1024];
        double[] ts = new double[1024];
        long[] rids = new long[1024];
        int n;

        /** Drop rows with ts <= cut (order kept). */
        void compact(double cut) {
            int j = 0;
            for (int i = 0; i < n; i++) {
                if (ts[i] > cut) {
                    keys[j] = keys[i];
                    ts[j] = ts[i];
                    rids[j] = rids[i];
                    j++;
                }
            }
            n = j;
        }

        void grow() {
            int cap = keys.length;
            if (cap >= Integer.MAX_VALUE / 32) throw new IllegalStateException("sketchql: too many kept rows in one "
                                                                               + "partition; repartition the input");
            keys = Arrays.copyOf(keys, 2 * cap);
            ts = Arrays.copyOf(ts, 2 * cap);
            rids = Arrays.copyOf(rids, 2 * cap);
        }
    }

    /**
     * Job 2: the valid rows with ts > floor (and, with a finite local margin, ts > hi_p -
     * margin) of one partition, packed as: valid, nullKeys, nullTs, kept, maxRid, nonFinite
     * (longs), lo, hi (doubles), then the kept keys, times, row ids.
     */
    static final class PartitionRows implements Function2<Integer, Iterator<InternalRow>, Iterator<byte[]>> {
        private static final long serialVersionUID = 1L;
        final int keyKind, timeKind, ridKind;   // ridKind -1: generated ids
        final double margin;                    // NaN or infinite: no local pruning
        final double floor;                     // global cutoff (-inf: none)
        final long ridBase;

        PartitionRows(int keyKind, int timeKind, int ridKind, double margin, double floor, long ridBase) {
            this.keyKind = keyKind;
            this.timeKind = timeKind;
            this.ridKind = ridKind;
            this.margin = margin;
            this.floor = floor;
            this.ridBase = ridBase;
        }

        @Override
        public Iterator<byte[]> call(Integer part, Iterator<InternalRow> it) {
            final Buf b = new Buf();
            final Reader rd = new Reader(keyKind, timeKind);
            final boolean local = !Double.isNaN(margin) && !Double.isInfinite(margin);
            final int rk = ridKind;
            long pos = ((long) part << 33) + ridBase;
            long valid = 0, nullKeys = 0, nullTs = 0, nonFinite = 0, maxRid = Long.MIN_VALUE;
            double lo = Double.POSITIVE_INFINITY, hi = Double.NEGATIVE_INFINITY;
            double cut = floor;   // max(floor, running hi - margin); rows with ts <= cut are dropped
            while (it.hasNext()) {
                InternalRow row = it.next();
                long rid = rk < 0 ? pos : (row.isNullAt(2) ? -1L : intAt(row, 2, rk));
                pos++;
                int st = rd.read(row);
                if (st != VALID) {
                    if (st == NULL_KEY) nullKeys++;
                    else nullTs++;
                    continue;
                }
                double t = rd.t;
                valid++;
                if (t < lo) lo = t;
                if (rid > maxRid) maxRid = rid;
                if (Double.isInfinite(t)) nonFinite++;
                if (t > hi) {
                    hi = t;
                    if (local && !Double.isInfinite(hi) && hi - margin > cut) cut = hi - margin;
                }
                if (nonFinite == 0 && t <= cut) continue;   // expired on arrival
                if (b.n == b.keys.length) {
                    if (nonFinite == 0) b.compact(cut);
                    if (b.n > b.keys.length / 2) b.grow();
                }
                b.keys[b.n] = rd.key;
                b.ts[b.n] = t;
                b.rids[b.n] = rid;
                b.n++;
            }
            if (nonFinite == 0) b.compact(cut);
            final int n = b.n;
            ByteBuffer out = ByteBuffer.allocate(PART_HEADER + 24 * n).order(ByteOrder.LITTLE_ENDIAN);
            out.putLong(valid).putLong(nullKeys).putLong(nullTs).putLong(n)
               .putLong(valid > 0 ? maxRid : -1L).putLong(nonFinite);
            out.putDouble(valid > 0 ? lo : Double.NaN).putDouble(valid > 0 ? hi : Double.NaN);
            out.position(PART_HEADER);
            out.asLongBuffer().put(b.keys, 0, n);
            out.position(PART_HEADER + 8 * n);
            out.asDoubleBuffer().put(b.ts, 0, n);
            out.position(PART_HEADER + 16 * n);
            out.asLongBuffer().put(b.rids, 0, n);
            return Collections.singletonList(out.array()).iterator();
        }
    }

    static int[] kinds(org.apache.spark.sql.classic.Dataset<Row> df) {
        org.apache.spark.sql.types.StructField[] f = df.schema().fields();
        int kk = keyKind(f[0].dataType()), tk = timeKind(f[1].dataType());
        int rk = f.length > 2 ? ridKind(f[2].dataType()) : -1;
        if (kk < 0) throw new IllegalArgumentException("sketchql: unsupported key type " + f[0].dataType().simpleString());
        if (tk < 0) throw new IllegalArgumentException("sketchql: unsupported time type " + f[1].dataType().simpleString());
        if (f.length > 2 && rk < 0)
            throw new IllegalArgumentException("sketchql: unsupported row id type " + f[2].dataType().simpleString());
        return new int[] {kk, tk, rk};
    }

    /**
     * Select the rows of {@code rows} (columns: key, ts[, row id]) an index build ingests and
     * write them to {@code path} (see the class comment).  {@code keyTime}: the same input
     * projected to (key, ts), scanned by job 1 when {@code prune}.  {@code margin}: seconds
     * behind the newest time beyond which rows are expired (NaN: keep all).  Returns the
     * number of kept rows.
     */
    public static long select(org.apache.spark.sql.classic.Dataset<Row> keyTime,
                              org.apache.spark.sql.classic.Dataset<Row> rows, double margin, boolean prune,
                              long ridBase, String path) throws IOException {
        int[] k = kinds(rows);
        JavaRDD<InternalRow> rdd = rows.queryExecution().toRdd().toJavaRDD();
        int parts = rdd.getNumPartitions();
        boolean finite = !Double.isNaN(margin) && !Double.isInfinite(margin);
        double floor = Double.NEGATIVE_INFINITY;
        if (prune && finite && parts > 0) {   // job 1: the global newest time
            JavaRDD<InternalRow> kt = keyTime.queryExecution().toRdd().toJavaRDD();
            double hi = Double.NEGATIVE_INFINITY, nonFinite = 0;
            for (double[] h : kt.mapPartitions(new NewestTime(k[0], k[1])).collect()) {
                hi = Math.max(hi, h[0]);
                nonFinite += h[1];
            }
            if (nonFinite == 0 && hi > Double.NEGATIVE_INFINITY) floor = hi - margin;
        }
        List<byte[]> got = parts == 0 ? Collections.<byte[]>emptyList()
            : rdd.mapPartitionsWithIndex(new PartitionRows(k[0], k[1], k[2], prune ? Double.NaN : margin, floor,
                                                           ridBase), false).collect();
        long valid = 0, nullKeys = 0, nullTs = 0, nonFinite = 0, maxRid = -1, kept = 0;
        double lo = Double.NaN, hi = Double.NaN;
        ByteBuffer[] bufs = new ByteBuffer[got.size()];
        for (int p = 0; p < bufs.length; p++) {
            ByteBuffer b = ByteBuffer.wrap(got.get(p)).order(ByteOrder.LITTLE_ENDIAN);
            bufs[p] = b;
            long v = b.getLong(0);
            valid += v;
            nullKeys += b.getLong(8);
            nullTs += b.getLong(16);
            kept += b.getLong(24);
            nonFinite += b.getLong(40);
            if (v > 0) {
                maxRid = Math.max(maxRid, b.getLong(32));
                double l = b.getDouble(48), h = b.getDouble(56);
                lo = Double.isNaN(lo) ? l : Math.min(lo, l);
                hi = Double.isNaN(hi) ? h : Math.max(hi, h);
            }
        }
        try (RandomAccessFile raf = new RandomAccessFile(path, "rw"); FileChannel ch = raf.getChannel()) {
            raf.setLength(0);
            ByteBuffer head = ByteBuffer.allocate(HEADER).order(ByteOrder.LITTLE_ENDIAN);
            head.putLong(parts).putLong(valid).putLong(nullKeys).putLong(nullTs).putLong(kept).putLong(maxRid)
                .putLong(nonFinite).putLong(0L).putDouble(lo).putDouble(hi);
            head.flip();
            while (head.hasRemaining()) ch.write(head);
            for (int col = 0; col < 3; col++) {   // keys, then times, then row ids
                for (ByteBuffer b : bufs) {
                    int n = (int) b.getLong(24);
                    ByteBuffer slice = ByteBuffer.wrap(b.array(), PART_HEADER + 8 * n * col, 8 * n);
                    while (slice.hasRemaining()) ch.write(slice);
                }
            }
        }
        return kept;
    }
}
