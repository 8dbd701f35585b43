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
 *   prune:    job 1 (NewestTime) finds the global hi -- or, on a loaded cache,
 *             cachedNewest() reads an upper bound U >= hi from the cached batch
 *             statistics without decoding a row; job 2 (PartitionRows) keeps the
 *             valid rows with ts > hi - margin (or > U - margin: a superset; the
 *             Python ingest prunes again with the exact hi);
 *   no prune: one job; each partition drops ts <= hi_p - margin, hi_p its own
 *             newest time (the merged clock is >= hi_p).  The running maximum
 *             only grows, so a row with ts <= (running hi_p) - margin is dropped
 *             on arrival and the buffer is compacted against the running cut
 *             whenever it fills (amortized O(1) per row).
 *
 * A row with an infinite time is never pruned (the ingest then reports it).
 * The driver writes, little-endian, to {@code path}:
 *
 *   header (8 longs): partitions, valid rows, nullKeys, nullTs, kept rows,
 *                     largest row id of a valid row (-1: none), non-finite times,
 *                     flags (1: keys int32, 2: row ids int32 offsets)
 *   2 doubles:        min and max valid time (NaN when none)
 *   kept x int64|32:  keys (integers / booleans as integers, floats as double bits;
 *                     int32 when every kept key fits)
 *   kept x double:    times
 *   kept x int64|32:  row ids, or (flag 2) int32 offsets from a per-partition base
 *   (flag 2) partitions x (base, kept rows) longs: row id = base + offset
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

    // key kinds: CountSketchJvm's numeric ones (same codes, the Python side maps both the same way)
    static final int K_LONG = CountSketchJvm.K_LONG, K_INT = CountSketchJvm.K_INT,
                     K_SHORT = CountSketchJvm.K_SHORT, K_BYTE = CountSketchJvm.K_BYTE,
                     K_BOOL = CountSketchJvm.K_BOOL, K_DOUBLE = CountSketchJvm.K_DOUBLE,
                     K_FLOAT = CountSketchJvm.K_FLOAT;
    static final int T_LONG = 0, T_INT = 1, T_SHORT = 2, T_BYTE = 3, T_DOUBLE = 5, T_FLOAT = 6,
                     T_MICROS = 7, T_DAYS = 8;
    static final int HEADER = 8 * 8 + 2 * 8;
    static final int PART_HEADER = 6 * 8 + 2 * 8 + 3 * 8;
    static final long KEYS_INT32 = 1L, RIDS_INT32 = 2L;   // narrow-column flags

    private IndexRowsJvm() {}

    /** Key kind of a Spark type, or -1 when keys of that type are not read here. */
    public static int keyKind(DataType t) {
        int k = CountSketchJvm.kindOf(t);
        return k == CountSketchJvm.K_STRING || k == CountSketchJvm.K_BINARY ? -1 : k;
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

        /** Drop rows with a finite ts <= cut (order kept; infinite times stay, the ingest reports them). */
        void compact(double cut) {
            int j = 0;
            for (int i = 0; i < n; i++) {
                if (ts[i] > cut || Double.isInfinite(ts[i])) {
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
                if (t <= cut && !Double.isInfinite(t)) continue;   // expired on arrival
                if (b.n == b.keys.length) {
                    if (local) b.compact(cut);   // (else every buffered row is > floor already)
                    if (b.n > b.keys.length / 2) b.grow();
                }
                b.keys[b.n] = rd.key;
                b.ts[b.n] = t;
                b.rids[b.n] = rid;
                b.n++;
            }
            if (local) b.compact(cut);
            return Collections.singletonList(pack(b, valid, nullKeys, nullTs, maxRid, nonFinite, lo, hi)).iterator();
        }

        /**
         * Lossless narrowing (fewer bytes to collect): integer keys that all fit in an int
         * go as int32; row ids as int32 offsets from the partition's smallest kept id when
         * the range fits (always, for generated ids of a partition under 2^31 rows).
         */
        byte[] pack(Buf b, long valid, long nullKeys, long nullTs, long maxRid, long nonFinite, double lo,
                    double hi) {
            final int n = b.n;
            boolean keys32 = keyKind != K_DOUBLE && keyKind != K_FLOAT;
            long rmin = Long.MAX_VALUE, rmax = Long.MIN_VALUE;
            for (int i = 0; i < n; i++) {
                long k = b.keys[i], r = b.rids[i];
                if (k != (int) k) keys32 = false;
                if (r < rmin) rmin = r;
                if (r > rmax) rmax = r;
            }
            if (n == 0) rmin = rmax = 0;
            boolean rids32 = rmax - rmin >= 0 && rmax - rmin <= Integer.MAX_VALUE;
            int kw = keys32 ? 4 : 8, rw = rids32 ? 4 : 8;
            long bytes = (long) PART_HEADER + (long) (kw + 8 + rw) * n;
            if (bytes > Integer.MAX_VALUE - 64)
                throw new IllegalStateException("sketchql: " + n + " kept rows in one partition; repartition the input");
            ByteBuffer out = ByteBuffer.allocate((int) bytes).order(ByteOrder.LITTLE_ENDIAN);
            out.putLong(valid).putLong(nullKeys).putLong(nullTs).putLong(n)
               .putLong(valid > 0 ? maxRid : -1L).putLong(nonFinite);
            out.putDouble(valid > 0 ? lo : Double.NaN).putDouble(valid > 0 ? hi : Double.NaN);
            out.putLong((keys32 ? KEYS_INT32 : 0L) | (rids32 ? RIDS_INT32 : 0L)).putLong(rmin).putLong(0L);
            if (keys32) {
                for (int i = 0; i < n; i++) out.putInt((int) b.keys[i]);
            } else {
                out.asLongBuffer().put(b.keys, 0, n);
                out.position(out.position() + 8 * n);
            }
            out.asDoubleBuffer().put(b.ts, 0, n);
            out.position(out.position() + 8 * n);
            if (rids32) {
                for (int i = 0; i < n; i++) out.putInt((int) (b.rids[i] - rmin));
            } else {
                out.asLongBuffer().put(b.rids, 0, n);
            }
            return out.array();
        }
    }


    // ------------------------------------------------------------------ cached column statistics
    /**
     * An upper bound of the times of {@code keyTime} (column 1) read from the statistics Spark
     * keeps for every cached batch (upperBound, nullCount, count of each column), with no row
     * decoded; NaN when the input is not a column projection of a loaded in-memory cache with
     * the default serializer (the caller then scans).  Internal Spark classes are reached by
     * reflection, so another Spark version only loses this shortcut.
     *
     * Seconds are a non-decreasing function of the raw value, so seconds(upperBound) bounds
     * every time of the batch from above; NaN is never an upper bound (NaN > x is false).
     */
    public static double cachedNewest(org.apache.spark.sql.classic.Dataset<Row> keyTime, int timeKind) {
        try {
            org.apache.spark.sql.catalyst.expressions.Attribute want =
                (org.apache.spark.sql.catalyst.expressions.Attribute) keyTime.queryExecution().analyzed().output().apply(1);
            long id = want.exprId().id();
            org.apache.spark.sql.catalyst.plans.logical.LogicalPlan plan = keyTime.queryExecution().withCachedData();
            while (plan instanceof org.apache.spark.sql.catalyst.plans.logical.Project) {
                org.apache.spark.sql.catalyst.plans.logical.Project pr = (org.apache.spark.sql.catalyst.plans.logical.Project) plan;
                boolean found = false;
                for (int i = 0; i < pr.projectList().length(); i++) {
                    Object e = pr.projectList().apply(i);
                    if (!(e instanceof org.apache.spark.sql.catalyst.expressions.NamedExpression)) continue;
                    org.apache.spark.sql.catalyst.expressions.NamedExpression ne =
                        (org.apache.spark.sql.catalyst.expressions.NamedExpression) e;
                    if (ne.exprId().id() != id) continue;
                    Object inner = ne instanceof org.apache.spark.sql.catalyst.expressions.Alias
                        ? ((org.apache.spark.sql.catalyst.expressions.Alias) ne).child() : ne;
                    if (!(inner instanceof org.apache.spark.sql.catalyst.expressions.AttributeReference)) return Double.NaN;
                    id = ((org.apache.spark.sql.catalyst.expressions.AttributeReference) inner).exprId().id();
                    found = true;
                    break;
                }
                if (!found) return Double.NaN;
                plan = pr.child();
            }
            if (!plan.getClass().getSimpleName().equals("InMemoryRelation")) return Double.NaN;
            scala.collection.Seq<?> out = (scala.collection.Seq<?>) plan.getClass().getMethod("output").invoke(plan);
            int col = -1;
            for (int i = 0; i < out.length(); i++) {
                if (((org.apache.spark.sql.catalyst.expressions.Attribute) out.apply(i)).exprId().id() == id) col = i;
            }
            if (col < 0) return Double.NaN;
            Object builder = plan.getClass().getMethod("cacheBuilder").invoke(plan);
            if (!(Boolean) builder.getClass().getMethod("isCachedColumnBuffersLoaded").invoke(builder)) return Double.NaN;
            @SuppressWarnings("unchecked")
            org.apache.spark.rdd.RDD<Object> batches =
                (org.apache.spark.rdd.RDD<Object>) builder.getClass().getMethod("cachedColumnBuffers").invoke(builder);
            double hi = Double.NEGATIVE_INFINITY;
            for (Double h : batches.toJavaRDD().mapPartitions(new BatchUpper(col, timeKind)).collect()) {
                if (h.isNaN()) return Double.NaN;
                hi = Math.max(hi, h);
            }
            return hi;
        } catch (Exception | LinkageError e) {
            return Double.NaN;
        }
    }

    /** Max over a partition's cached batches of seconds(upperBound of column col); NaN: unreadable. */
    static final class BatchUpper implements FlatMapFunction<Iterator<Object>, Double> {
        private static final long serialVersionUID = 1L;
        final int col, timeKind;

        BatchUpper(int col, int timeKind) {
            this.col = col;
            this.timeKind = timeKind;
        }

        @Override
        public Iterator<Double> call(Iterator<Object> it) throws Exception {
            double hi = Double.NEGATIVE_INFINITY;
            java.lang.reflect.Method statsOf = null;
            while (it.hasNext()) {
                Object b = it.next();
                if (!b.getClass().getSimpleName().equals("DefaultCachedBatch"))
                    return Collections.singletonList(Double.NaN).iterator();
                if (statsOf == null) statsOf = b.getClass().getMethod("stats");
                InternalRow st = (InternalRow) statsOf.invoke(b);
                int base = 5 * col;   // lowerBound, upperBound, nullCount, count, sizeInBytes
                if (st.numFields() < base + 5) return Collections.singletonList(Double.NaN).iterator();
                if (st.isNullAt(base + 1) || st.getInt(base + 2) >= st.getInt(base + 3)) continue;   // all null
                double u;
                switch (timeKind) {
                    case T_DOUBLE: u = st.getDouble(base + 1); break;
                    case T_FLOAT: u = st.getFloat(base + 1); break;
                    case T_MICROS: u = (double) st.getLong(base + 1) / 1e6; break;
                    case T_DAYS: u = (double) st.getInt(base + 1) * 86400.0; break;
                    default: u = (double) intAt(st, base + 1, timeKind); break;
                }
                if (u != u) return Collections.singletonList(Double.NaN).iterator();
                if (u > hi) hi = u;
            }
            return Collections.singletonList(hi).iterator();
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
                              long ridBase, String path, boolean useCachedStats) throws IOException {
        int[] k = kinds(rows);
        JavaRDD<InternalRow> rdd = rows.queryExecution().toRdd().toJavaRDD();
        int parts = rdd.getNumPartitions();
        boolean finite = !Double.isNaN(margin) && !Double.isInfinite(margin);
        double floor = Double.NEGATIVE_INFINITY;
        if (prune && finite && parts > 0) {   // job 1: the global newest time, or an upper bound of it
            double hi = useCachedStats ? cachedNewest(keyTime, k[1]) : Double.NaN;
            double nonFinite = 0;
            if (Double.isNaN(hi)) {
                hi = Double.NEGATIVE_INFINITY;
                JavaRDD<InternalRow> kt = keyTime.queryExecution().toRdd().toJavaRDD();
                for (double[] h : kt.mapPartitions(new NewestTime(k[0], k[1])).collect()) {
                    hi = Math.max(hi, h[0]);
                    nonFinite += h[1];
                }
            }
            // a bound hi' >= hi only keeps more rows (ts > hi' - margin); Python re-prunes exactly
            if (nonFinite == 0 && hi > Double.NEGATIVE_INFINITY && !Double.isInfinite(hi)) floor = hi - margin;
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
            // keys: int32 when every partition narrowed them (else widened), times, row ids:
            // int32 offsets + a (base, count) table per partition when every partition narrowed
            boolean keys32 = true, rids32 = true;
            for (ByteBuffer b : bufs) {
                keys32 &= (b.getLong(64) & KEYS_INT32) != 0;
                rids32 &= (b.getLong(64) & RIDS_INT32) != 0;
            }
            for (int col = 0; col < 3; col++) {
                for (ByteBuffer b : bufs) {
                    int n = (int) b.getLong(24);
                    long fl = b.getLong(64);
                    int kw = (fl & KEYS_INT32) != 0 ? 4 : 8, rw = (fl & RIDS_INT32) != 0 ? 4 : 8;
                    int off = col == 0 ? PART_HEADER : col == 1 ? PART_HEADER + kw * n : PART_HEADER + (kw + 8) * n;
                    int w = col == 0 ? kw : col == 1 ? 8 : rw;
                    boolean narrowOut = col == 0 ? keys32 : col == 2 && rids32;
                    if (w == 8 || narrowOut) {
                        ByteBuffer slice = ByteBuffer.wrap(b.array(), off, w * n);
                        while (slice.hasRemaining()) ch.write(slice);
                    } else {   // widen this partition's int32 column to int64
                        long base = col == 2 ? b.getLong(72) : 0L;
                        ByteBuffer wide = ByteBuffer.allocate(8 * n).order(ByteOrder.LITTLE_ENDIAN);
                        for (int i = 0; i < n; i++) wide.putLong(base + b.getInt(off + 4 * i));
                        wide.flip();
                        while (wide.hasRemaining()) ch.write(wide);
                    }
                }
            }
            if (rids32) {
                ByteBuffer table = ByteBuffer.allocate(16 * bufs.length).order(ByteOrder.LITTLE_ENDIAN);
                for (ByteBuffer b : bufs) table.putLong(b.getLong(72)).putLong(b.getLong(24));
                table.flip();
                while (table.hasRemaining()) ch.write(table);
            }
            ByteBuffer flags = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);
            flags.putLong((keys32 ? KEYS_INT32 : 0L) | (rids32 ? RIDS_INT32 : 0L)).flip();
            ch.write(flags, 56);   // header slot 7
        }
        return kept;
    }
}
