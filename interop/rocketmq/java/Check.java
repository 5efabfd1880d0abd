import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import java.io.File;
import java.io.IOException;
import java.io.PrintWriter;
import java.io.RandomAccessFile;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.UtilAll;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;
import org.apache.rocketmq.store.ConsumeQueue;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.DispatchRequest;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.GetMessageStatus;
import org.apache.rocketmq.store.QueryMessageResult;
import org.apache.rocketmq.store.SelectMappedBufferResult;
import org.apache.rocketmq.store.config.BrokerRole;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.index.IndexFile;
import org.apache.rocketmq.store.index.IndexService;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

/**
 * Reads a store Wharf wrote with RocketMQ 4.9's own classes and prints what they find, one JSON object a
 * line, then a summary.
 *
 * <pre>java Check STORE_COPY API_RECORDS_DIR OUT.jsonl</pre>
 *
 * STORE_COPY must be a copy: step 4 opens it with DefaultMessageStore, whose recovery may truncate files.
 * <ol>
 * <li>CommitLog: every record, with CommitLog.checkMessageAndReturnSize (the recovery/dispatch check,
 *     CRC on) and MessageDecoder.decode; CRC compared with UtilAll.crc32(body).</li>
 * <li>ConsumeQueue: each queue opened with RocketMQ's ConsumeQueue (load, recover), its 20-byte units
 *     read as DefaultMessageStore.getMessage reads them, each checked against the record it names.</li>
 * <li>Index: each file opened with IndexFile (load) and queried with selectPhyOffset for every key and
 *     unique key, named as IndexService.buildKey names them, over all time and over the second before
 *     the record's store time.</li>
 * <li>Broker view: DefaultMessageStore.load() (normal recovery) and start() as a SLAVE, then getMessage
 *     over every queue, queryMessage for every key, lookMessageByOffset for every record.</li>
 * <li>The API's binary pull answers (Accept: application/vnd.wharf.records) decoded with MessageDecoder
 *     and compared byte for byte with the CommitLog.</li>
 * </ol>
 */
public final class Check {
    private static final int MESSAGE_MAGIC = 0xDAA320A7;
    private static final int BLANK_MAGIC = 0xCBD43194;
    private static final String SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX";

    private final Gson gson = new GsonBuilder().disableHtmlEscaping().serializeNulls().create();
    private final PrintWriter out;
    private final Map<String, Integer> counts = new TreeMap<>();
    private final List<String> problems = new ArrayList<>();
    /** Every record the CommitLog walk decoded, by CommitLog offset. */
    private final TreeMap<Long, Rec> records = new TreeMap<>();

    private static final class Rec {
        MessageExt msg;
        DispatchRequest dispatch;
        byte[] raw;
    }

    private Check(PrintWriter out) {
        this.out = out;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: Check STORE_COPY API_RECORDS_DIR OUT.jsonl");
            System.exit(2);
        }
        int status = 0;
        try (PrintWriter out = new PrintWriter(Files.newBufferedWriter(new File(args[2]).toPath()))) {
            new Check(out).run(new File(args[0]), new File(args[1]));
        } catch (Throwable t) {
            t.printStackTrace();
            status = 1;
        }
        System.exit(status); // the store's service threads are not daemons
    }

    private void run(File root, File apiRecords) throws Exception {
        MessageStoreConfig config = new MessageStoreConfig();
        config.setStorePathRootDir(root.getPath());
        config.setStorePathCommitLog(new File(root, "commitlog").getPath());
        config.setBrokerRole(BrokerRole.SLAVE); // reads only: no scheduled delivery, no HA master duties
        config.setHaListenPort(0);
        // Sizes as the store was written (RocketMQ's defaults unless Wharf was configured otherwise): the
        // segments' from their files, the index geometry from -Dinterop.maxHashSlotNum/maxIndexNum.
        config.setMappedFileSizeCommitLog((int) firstFile(new File(root, "commitlog")).length());
        File cq = firstFile(new File(root, "consumequeue"));
        if (cq != null) config.setMappedFileSizeConsumeQueue((int) firstFile(firstFile(cq)).length());
        config.setMaxHashSlotNum(Integer.getInteger("interop.maxHashSlotNum", config.getMaxHashSlotNum()));
        config.setMaxIndexNum(Integer.getInteger("interop.maxIndexNum", config.getMaxIndexNum()));
        JsonObject sizes = new JsonObject();
        sizes.addProperty("kind", "config");
        sizes.addProperty("mappedFileSizeCommitLog", config.getMappedFileSizeCommitLog());
        sizes.addProperty("mappedFileSizeConsumeQueue", config.getMappedFileSizeConsumeQueue());
        sizes.addProperty("maxHashSlotNum", config.getMaxHashSlotNum());
        sizes.addProperty("maxIndexNum", config.getMaxIndexNum());
        emit(sizes);
        DefaultMessageStore store =
            new DefaultMessageStore(config, new BrokerStatsManager("interop", true), null, new BrokerConfig());
        // The delay levels, which the dispatch check needs for SCHEDULE_TOPIC_XXXX's tag codes.
        store.getScheduleMessageService().parseDelayLevel();

        walkCommitLog(store, new File(root, "commitlog"));
        checkConsumeQueues(store, config, new File(root, "consumequeue"));
        checkIndexFiles(store, config, new File(root, "index"));
        checkBrokerView(store);
        checkApiRecords(apiRecords);

        JsonObject summary = new JsonObject();
        summary.addProperty("kind", "summary");
        counts.forEach(summary::addProperty);
        JsonArray list = new JsonArray();
        problems.forEach(list::add);
        summary.add("problems", list);
        emit(summary);
        System.out.println("RocketMQ check summary:");
        counts.forEach((k, v) -> System.out.printf("  %-44s %d%n", k, v));
        System.out.println(problems.isEmpty() ? "  no problems" : "  problems (" + problems.size() + "):");
        problems.forEach(p -> System.out.println("   - " + p));
    }

    /** The first entry of a directory, by name (segments are named by their first offset). */
    private static File firstFile(File dir) {
        File[] files = dir.listFiles();
        if (files == null || files.length == 0) return null;
        Arrays.sort(files);
        return files[0];
    }

    // 1. CommitLog ---------------------------------------------------------------------------------------

    private void walkCommitLog(DefaultMessageStore store, File dir) throws IOException {
        File[] files = dir.listFiles();
        Arrays.sort(files);
        walk:
        for (File file : files) {
            long base = Long.parseLong(file.getName());
            MappedByteBuffer map;
            try (RandomAccessFile raf = new RandomAccessFile(file, "r")) {
                map = raf.getChannel().map(FileChannel.MapMode.READ_ONLY, 0, raf.length());
            }
            int pos = 0;
            while (pos + 8 <= map.capacity()) {
                int total = map.getInt(pos);
                int magic = map.getInt(pos + 4);
                if (magic == BLANK_MAGIC) {
                    JsonObject blank = new JsonObject();
                    blank.addProperty("kind", "blank");
                    blank.addProperty("offset", base + pos);
                    blank.addProperty("size", total);
                    emit(blank);
                    count("commitlog: blank (end of segment) records");
                    continue walk;
                }
                if (magic != MESSAGE_MAGIC) {
                    JsonObject end = new JsonObject();
                    end.addProperty("kind", "end");
                    end.addProperty("offset", base + pos);
                    end.addProperty("totalSize", total);
                    end.addProperty("magic", Integer.toHexString(magic));
                    emit(end);
                    break walk;
                }
                ByteBuffer at = ((ByteBuffer) map.duplicate().position(pos)).slice();
                // RocketMQ's recovery and dispatch check (CRC on, body read), as recoverNormally calls it.
                DispatchRequest dispatch = store.getCommitLog().checkMessageAndReturnSize(at.duplicate(), true, true);
                MessageExt msg = MessageDecoder.decode(at.duplicate(), true, false, false);
                Rec rec = new Rec();
                rec.msg = msg;
                rec.dispatch = dispatch;
                rec.raw = new byte[Math.max(0, Math.min(total, map.capacity() - pos))];
                at.duplicate().get(rec.raw);
                records.put(base + pos, rec);
                emit(recordJson("record", base + pos, msg, dispatch));
                count("commitlog: records");
                if (!dispatch.isSuccess() || dispatch.getMsgSize() != total) {
                    problem("commitlog @" + (base + pos) + ": CommitLog.checkMessageAndReturnSize rejects the record"
                        + " (success=" + dispatch.isSuccess() + ", size=" + dispatch.getMsgSize() + "): RocketMQ's"
                        + " recovery would end the log here");
                    count("commitlog: records rejected by checkMessageAndReturnSize");
                }
                if (msg == null) {
                    problem("commitlog @" + (base + pos) + ": MessageDecoder.decode returned null");
                    count("commitlog: records MessageDecoder could not decode");
                } else {
                    if (UtilAll.crc32(msg.getBody()) != msg.getBodyCRC()) {
                        problem("commitlog @" + (base + pos) + ": body CRC " + msg.getBodyCRC() + " != UtilAll.crc32 "
                            + UtilAll.crc32(msg.getBody()));
                        count("commitlog: CRC mismatches");
                    }
                    if (msg.getCommitLogOffset() != base + pos) {
                        problem("commitlog @" + (base + pos) + ": PHYSICALOFFSET field says " + msg.getCommitLogOffset());
                        count("commitlog: PHYSICALOFFSET mismatches");
                    }
                }
                if (total <= 0) {
                    break walk;
                }
                pos += total;
            }
        }
        counts.putIfAbsent("commitlog: CRC mismatches", 0);
        counts.putIfAbsent("commitlog: records rejected by checkMessageAndReturnSize", 0);
    }

    private JsonObject recordJson(String kind, long offset, MessageExt msg, DispatchRequest dispatch) {
        JsonObject o = new JsonObject();
        o.addProperty("kind", kind);
        o.addProperty("offset", offset);
        if (msg == null) {
            return o;
        }
        o.addProperty("topic", msg.getTopic());
        o.addProperty("queueId", msg.getQueueId());
        o.addProperty("queueOffset", msg.getQueueOffset());
        o.addProperty("commitLogOffset", msg.getCommitLogOffset());
        o.addProperty("storeSize", msg.getStoreSize());
        o.addProperty("bodyCRC", msg.getBodyCRC());
        o.addProperty("bodyCRCComputed", UtilAll.crc32(msg.getBody()));
        o.addProperty("crcOk", UtilAll.crc32(msg.getBody()) == msg.getBodyCRC());
        o.addProperty("flag", msg.getFlag());
        o.addProperty("sysFlag", msg.getSysFlag());
        o.addProperty("bornTimestamp", msg.getBornTimestamp());
        o.addProperty("bornHost", host(msg.getBornHost()));
        o.addProperty("storeTimestamp", msg.getStoreTimestamp());
        o.addProperty("storeHost", host(msg.getStoreHost()));
        o.addProperty("reconsumeTimes", msg.getReconsumeTimes());
        o.addProperty("preparedTransactionOffset", msg.getPreparedTransactionOffset());
        o.add("properties", gson.toJsonTree(new TreeMap<>(msg.getProperties())));
        byte[] body = msg.getBody() == null ? new byte[0] : msg.getBody();
        o.addProperty("bodyLength", body.length);
        o.addProperty("bodyBase64", Base64.getEncoder().encodeToString(body));
        o.addProperty("msgId", msg.getMsgId());
        o.addProperty("uniqKey", msg.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
        o.addProperty("tags", msg.getTags());
        o.addProperty("keys", msg.getKeys());
        if (dispatch != null) {
            JsonObject d = new JsonObject();
            d.addProperty("success", dispatch.isSuccess());
            d.addProperty("msgSize", dispatch.getMsgSize());
            d.addProperty("tagsCode", dispatch.getTagsCode());
            d.addProperty("keys", dispatch.getKeys());
            d.addProperty("uniqKey", dispatch.getUniqKey());
            o.add("dispatch", d);
        }
        return o;
    }

    private static String host(java.net.SocketAddress address) {
        InetSocketAddress a = (InetSocketAddress) address;
        String ip = a.getAddress().getHostAddress();
        return (ip.contains(":") ? "[" + ip + "]" : ip) + ":" + a.getPort();
    }

    /** Whether RocketMQ's dispatcher (CommitLogDispatcherBuildConsumeQueue) puts the record in a queue. */
    private static boolean dispatchedToQueue(Rec rec) {
        int type = MessageSysFlag.getTransactionValue(rec.dispatch.getSysFlag());
        return rec.dispatch.isSuccess() && rec.dispatch.getMsgSize() > 0
            && (type == MessageSysFlag.TRANSACTION_NOT_TYPE || type == MessageSysFlag.TRANSACTION_COMMIT_TYPE);
    }

    // 2. ConsumeQueue ------------------------------------------------------------------------------------

    private void checkConsumeQueues(DefaultMessageStore store, MessageStoreConfig config, File dir) {
        Map<String, Long> seen = new TreeMap<>();
        File[] topics = dir.listFiles();
        Arrays.sort(topics);
        for (File topicDir : topics) {
            File[] queues = topicDir.listFiles();
            Arrays.sort(queues);
            for (File queueDir : queues) {
                String topic = topicDir.getName();
                int queueId = Integer.parseInt(queueDir.getName());
                ConsumeQueue cq = new ConsumeQueue(topic, queueId, dir.getPath(), config.getMappedFileSizeConsumeQueue(), store);
                boolean loaded = cq.load();
                cq.recover();
                long min = cq.getMinOffsetInQueue();
                long max = cq.getMaxOffsetInQueue();
                JsonObject q = new JsonObject();
                q.addProperty("kind", "cq-queue");
                q.addProperty("topic", topic);
                q.addProperty("queueId", queueId);
                q.addProperty("loaded", loaded);
                q.addProperty("minOffset", min);
                q.addProperty("maxOffset", max);
                emit(q);
                if (!loaded) {
                    problem("consumequeue " + topic + "/" + queueId + ": ConsumeQueue.load() failed");
                }
                for (long i = min; i < max; i++) {
                    SelectMappedBufferResult unit = cq.getIndexBuffer(i);
                    if (unit == null) {
                        problem("consumequeue " + topic + "/" + queueId + " #" + i + ": getIndexBuffer returned null");
                        continue;
                    }
                    // The unit as DefaultMessageStore.getMessage reads it.
                    long offsetPy = unit.getByteBuffer().getLong();
                    int sizePy = unit.getByteBuffer().getInt();
                    long tagsCode = unit.getByteBuffer().getLong();
                    unit.release();
                    count("consumequeue: entries");
                    seen.put(topic + "/" + queueId + "/" + i, offsetPy);
                    List<String> bad = new ArrayList<>();
                    Rec rec = records.get(offsetPy);
                    if (rec == null || rec.msg == null) {
                        bad.add("no record starts at CommitLog offset " + offsetPy);
                    } else {
                        MessageExt m = rec.msg;
                        if (sizePy != m.getStoreSize()) bad.add("size " + sizePy + " != record size " + m.getStoreSize());
                        if (!topic.equals(m.getTopic())) bad.add("record topic " + m.getTopic());
                        if (queueId != m.getQueueId()) bad.add("record queue " + m.getQueueId());
                        if (i != m.getQueueOffset()) bad.add("record queue offset " + m.getQueueOffset());
                        if (tagsCode != rec.dispatch.getTagsCode()) {
                            bad.add("tagsCode " + tagsCode + " != " + rec.dispatch.getTagsCode() + " (RocketMQ's dispatch: "
                                + (SCHEDULE_TOPIC.equals(topic) ? "delivery time" : "tags.hashCode()") + ")");
                        }
                        if (!dispatchedToQueue(rec)) bad.add("RocketMQ would not dispatch this record to a queue"
                            + " (sysFlag " + m.getSysFlag() + ")");
                    }
                    JsonObject e = new JsonObject();
                    e.addProperty("kind", "cq");
                    e.addProperty("topic", topic);
                    e.addProperty("queueId", queueId);
                    e.addProperty("queueOffset", i);
                    e.addProperty("commitLogOffset", offsetPy);
                    e.addProperty("size", sizePy);
                    e.addProperty("tagsCode", tagsCode);
                    e.add("mismatches", gson.toJsonTree(bad));
                    emit(e);
                    if (!bad.isEmpty()) {
                        count("consumequeue: mismatching entries");
                        problem("consumequeue " + topic + "/" + queueId + " #" + i + ": " + String.join("; ", bad));
                    }
                }
            }
        }
        counts.putIfAbsent("consumequeue: mismatching entries", 0);
        // Every record RocketMQ would dispatch must have its entry.
        for (Map.Entry<Long, Rec> e : records.entrySet()) {
            Rec rec = e.getValue();
            if (rec.msg == null || !dispatchedToQueue(rec)) continue;
            String where = rec.msg.getTopic() + "/" + rec.msg.getQueueId() + "/" + rec.msg.getQueueOffset();
            if (!Long.valueOf(e.getKey()).equals(seen.get(where))) {
                count("consumequeue: records without their entry");
                problem("commitlog @" + e.getKey() + ": no ConsumeQueue entry " + where + " points at it");
            }
        }
        counts.putIfAbsent("consumequeue: records without their entry", 0);
    }

    // 3. Index -------------------------------------------------------------------------------------------

    /** Every (topic, key) RocketMQ's IndexService.buildIndex files a record under, with the record's offset. */
    private List<Object[]> expectedKeys() {
        List<Object[]> keys = new ArrayList<>();
        for (Map.Entry<Long, Rec> e : records.entrySet()) {
            DispatchRequest d = e.getValue().dispatch;
            if (!d.isSuccess() || d.getMsgSize() <= 0
                || MessageSysFlag.getTransactionValue(d.getSysFlag()) == MessageSysFlag.TRANSACTION_ROLLBACK_TYPE) {
                continue;
            }
            if (d.getUniqKey() != null) keys.add(new Object[] {d.getTopic(), d.getUniqKey(), e.getKey(), "uniqKey"});
            if (d.getKeys() != null && d.getKeys().length() > 0) {
                for (String key : d.getKeys().split(MessageConst.KEY_SEPARATOR)) {
                    if (key.length() > 0) keys.add(new Object[] {d.getTopic(), key, e.getKey(), "key"});
                }
            }
        }
        return keys;
    }

    private void checkIndexFiles(DefaultMessageStore store, MessageStoreConfig config, File dir) throws Exception {
        // IndexService.buildKey is private: call RocketMQ's own through reflection, not a copy of it.
        Field field = DefaultMessageStore.class.getDeclaredField("indexService");
        field.setAccessible(true);
        IndexService indexService = (IndexService) field.get(store);
        Method buildKey = IndexService.class.getDeclaredMethod("buildKey", String.class, String.class);
        buildKey.setAccessible(true);

        File[] files = dir.listFiles();
        Arrays.sort(files);
        List<IndexFile> indexFiles = new ArrayList<>();
        for (File file : files) {
            IndexFile f = new IndexFile(file.getPath(), config.getMaxHashSlotNum(), config.getMaxIndexNum(), 0, 0);
            f.load();
            indexFiles.add(f);
            JsonObject h = new JsonObject();
            h.addProperty("kind", "index-file");
            h.addProperty("file", file.getName());
            h.addProperty("beginTimestamp", f.getBeginTimestamp());
            h.addProperty("endTimestamp", f.getEndTimestamp());
            h.addProperty("endPhyOffset", f.getEndPhyOffset());
            emit(h);
            count("index: files");
        }
        for (Object[] k : expectedKeys()) {
            String topic = (String) k[0];
            String key = (String) k[1];
            long offset = (Long) k[2];
            String indexKey = (String) buildKey.invoke(indexService, topic, key);
            List<Long> found = new ArrayList<>();
            for (IndexFile f : indexFiles) {
                f.selectPhyOffset(found, indexKey, 1000, 0, Long.MAX_VALUE);
            }
            boolean ok = found.contains(offset);
            // Also within the second before the record's store time, as a query by time finds it: the
            // entry's seconds since the file's begin timestamp put it at most 1 s before that time.
            long stored = records.get(offset).dispatch.getStoreTimestamp();
            List<Long> inWindow = new ArrayList<>();
            for (IndexFile f : indexFiles) {
                if (f.isTimeMatched(stored - 1000, stored)) {
                    f.selectPhyOffset(inWindow, indexKey, 1000, stored - 1000, stored);
                }
            }
            boolean okInWindow = inWindow.contains(offset);
            JsonObject o = new JsonObject();
            o.addProperty("kind", "index");
            o.addProperty("topic", topic);
            o.addProperty("key", key);
            o.addProperty("what", (String) k[3]);
            o.addProperty("offset", offset);
            o.add("found", gson.toJsonTree(found));
            o.addProperty("ok", ok);
            o.addProperty("okInTimeWindow", okInWindow);
            emit(o);
            count("index: keys looked up");
            if (ok) {
                count("index: keys found");
            } else {
                problem("index: " + k[3] + " " + indexKey + " of the record @" + offset + " not found (got " + found + ")");
            }
            if (okInWindow) {
                count("index: keys found within [storeTimestamp - 1 s, storeTimestamp]");
            } else if (ok) {
                problem("index: " + indexKey + " of the record @" + offset + " not found by a query of the second"
                    + " before its store time " + stored + " (got " + inWindow + ")");
            }
        }
        counts.putIfAbsent("index: keys found", 0);
        counts.putIfAbsent("index: keys found within [storeTimestamp - 1 s, storeTimestamp]", 0);
    }

    // 4. DefaultMessageStore -----------------------------------------------------------------------------

    // 4. DefaultMessageStore -----------------------------------------------------------------------------

    private void checkBrokerView(DefaultMessageStore store) throws Exception {
        boolean loaded = store.load(); // CommitLog, ConsumeQueues, checkpoint, index; then normal recovery
        Map.Entry<Long, Rec> last = records.lastEntry();
        long walkEnd = last == null ? 0 : last.getKey() + last.getValue().raw.length;
        JsonObject o = new JsonObject();
        o.addProperty("kind", "broker-load");
        o.addProperty("loaded", loaded);
        o.addProperty("minPhyOffset", store.getMinPhyOffset());
        o.addProperty("maxPhyOffset", store.getMaxPhyOffset());
        o.addProperty("walkEnd", walkEnd);
        // config/delayOffset.json as ScheduleMessageService.load() took it (and checked each level's
        // offset against its SCHEDULE_TOPIC_XXXX queue: correctDelayOffset logs what it corrects).
        Field table = store.getScheduleMessageService().getClass().getDeclaredField("offsetTable");
        table.setAccessible(true);
        o.add("delayOffsetTable", gson.toJsonTree(new TreeMap<>((Map<?, ?>) table.get(store.getScheduleMessageService()))));
        emit(o);
        if (!loaded) {
            problem("DefaultMessageStore.load() failed: no broker view");
            return;
        }
        if (store.getMaxPhyOffset() != walkEnd) {
            problem("DefaultMessageStore recovered the CommitLog to " + store.getMaxPhyOffset() + ", the walk ends at " + walkEnd);
        }
        store.start();

        // getMessage, as a PullMessageProcessor calls it, over every queue the store loaded.
        Map<Long, Integer> pulled = new TreeMap<>();
        for (Map.Entry<String, ?> t : new TreeMap<>(store.getConsumeQueueTable()).entrySet()) {
            String topic = t.getKey();
            for (Integer queueId : new TreeSet<>(store.getConsumeQueueTable().get(topic).keySet())) {
                long min = store.getMinOffsetInQueue(topic, queueId);
                long max = store.getMaxOffsetInQueue(topic, queueId);
                long offset = min;
                List<String> statuses = new ArrayList<>();
                while (offset < max) {
                    GetMessageResult r = store.getMessage("interop-check", topic, queueId, offset, 32, null);
                    if (r == null) {
                        problem("getMessage " + topic + "/" + queueId + " @" + offset + " returned null");
                        break;
                    }
                    statuses.add(r.getStatus().name());
                    for (ByteBuffer b : r.getMessageBufferList()) {
                        byte[] raw = new byte[b.remaining()];
                        b.duplicate().get(raw);
                        MessageExt m = MessageDecoder.decode(b.duplicate(), true, false, false);
                        JsonObject p = recordJson("pull", m == null ? -1 : m.getCommitLogOffset(), m, null);
                        Rec rec = m == null ? null : records.get(m.getCommitLogOffset());
                        boolean same = rec != null && Arrays.equals(raw, rec.raw);
                        p.addProperty("bytesEqualCommitLog", same);
                        emit(p);
                        count("broker: messages read by getMessage");
                        if (!same) problem("getMessage " + topic + "/" + queueId + ": a message differs from the CommitLog record");
                        if (m != null) pulled.merge(m.getCommitLogOffset(), 1, Integer::sum);
                    }
                    r.release();
                    if (r.getStatus() != GetMessageStatus.FOUND || r.getNextBeginOffset() <= offset) {
                        if (r.getStatus() != GetMessageStatus.FOUND) {
                            problem("getMessage " + topic + "/" + queueId + " @" + offset + ": " + r.getStatus()
                                + " before the queue's max offset " + max);
                        }
                        break;
                    }
                    offset = r.getNextBeginOffset();
                }
                JsonObject q = new JsonObject();
                q.addProperty("kind", "broker-queue");
                q.addProperty("topic", topic);
                q.addProperty("queueId", queueId);
                q.addProperty("minOffset", min);
                q.addProperty("maxOffset", max);
                q.add("statuses", gson.toJsonTree(statuses));
                emit(q);
            }
        }
        for (Map.Entry<Long, Rec> e : records.entrySet()) {
            if (e.getValue().msg != null && dispatchedToQueue(e.getValue()) && !pulled.containsKey(e.getKey())) {
                problem("getMessage never returned the record @" + e.getKey());
                count("broker: dispatchable records getMessage did not return");
            }
        }
        counts.putIfAbsent("broker: dispatchable records getMessage did not return", 0);

        // viewMessageById: the offset decoded from the message id, then lookMessageByOffset.
        for (Map.Entry<Long, Rec> e : records.entrySet()) {
            MessageExt want = e.getValue().msg;
            if (want == null) continue;
            long offset = MessageDecoder.decodeMessageId(want.getMsgId()).getOffset();
            MessageExt got = store.lookMessageByOffset(offset);
            boolean ok = got != null && got.getMsgId().equals(want.getMsgId()) && Arrays.equals(got.getBody(), want.getBody())
                && got.getProperties().equals(want.getProperties());
            count("broker: lookMessageByOffset(decodeMessageId(msgId))");
            if (!ok) {
                problem("lookMessageByOffset(" + offset + ") for " + want.getMsgId() + " gives another message");
                count("broker: lookMessageByOffset mismatches");
            }
        }
        counts.putIfAbsent("broker: lookMessageByOffset mismatches", 0);

        // queryMessage (IndexService.queryOffset, then the CommitLog), as QueryMessageProcessor calls it.
        for (Object[] k : expectedKeys()) {
            String topic = (String) k[0];
            String key = (String) k[1];
            long offset = (Long) k[2];
            QueryMessageResult r = store.queryMessage(topic, key, 1000, 0, Long.MAX_VALUE);
            List<Long> found = new ArrayList<>();
            for (ByteBuffer b : r.getMessageBufferList()) {
                found.add(b.getLong(b.position() + MessageDecoder.PHY_POS_POSITION));
            }
            r.release();
            JsonObject q = new JsonObject();
            q.addProperty("kind", "broker-query");
            q.addProperty("topic", topic);
            q.addProperty("key", key);
            q.addProperty("offset", offset);
            q.add("found", gson.toJsonTree(found));
            emit(q);
            count("broker: queryMessage keys looked up");
            if (found.contains(offset)) {
                count("broker: queryMessage keys found");
            } else {
                problem("queryMessage(" + topic + ", " + key + ") does not return the record @" + offset + " (got " + found + ")");
            }
        }
        counts.putIfAbsent("broker: queryMessage keys found", 0);
        store.shutdown();
    }

    // 5. The API's binary pull answers -------------------------------------------------------------------

    private void checkApiRecords(File dir) throws IOException {
        File[] files = dir.listFiles((d, name) -> name.endsWith(".bin"));
        Arrays.sort(files);
        for (File file : files) {
            ByteBuffer all = ByteBuffer.wrap(Files.readAllBytes(file.toPath()));
            while (all.remaining() >= 4) {
                int size = all.getInt(all.position());
                if (size <= 0 || size > all.remaining()) {
                    problem("API records " + file.getName() + " @" + all.position() + ": bad TOTALSIZE " + size);
                    break;
                }
                byte[] raw = new byte[size];
                all.get(raw);
                MessageExt m = MessageDecoder.decode(ByteBuffer.wrap(raw), true, false, false);
                Rec rec = m == null ? null : records.get(m.getCommitLogOffset());
                JsonObject o = recordJson("api-record", m == null ? -1 : m.getCommitLogOffset(), m, null);
                o.addProperty("file", file.getName());
                o.addProperty("bytesEqualCommitLog", rec != null && Arrays.equals(raw, rec.raw));
                emit(o);
                count("api records: messages decoded");
                if (rec == null || !Arrays.equals(raw, rec.raw)) {
                    count("api records: differ from the CommitLog");
                    problem("API records " + file.getName() + ": the record @" + (m == null ? "?" : m.getCommitLogOffset())
                        + " differs from the CommitLog's bytes");
                }
            }
        }
        counts.putIfAbsent("api records: differ from the CommitLog", 0);
    }

    // ----------------------------------------------------------------------------------------------------

    private void count(String name) {
        counts.merge(name, 1, Integer::sum);
    }

    private void problem(String text) {
        problems.add(text);
    }

    private void emit(JsonObject o) {
        out.println(gson.toJson(o));
    }
}
