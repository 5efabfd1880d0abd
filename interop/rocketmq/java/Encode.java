import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import java.io.ByteArrayOutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.Base64;
import java.util.TreeMap;
import org.apache.rocketmq.common.UtilAll;
import org.apache.rocketmq.common.compression.CompressionType;
import org.apache.rocketmq.common.compression.CompressorFactory;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;

/**
 * Writes CommitLog records encoded by RocketMQ 4.9's MessageDecoder.encode (the layout CommitLog's
 * DefaultAppendMessageCallback writes), back to back as in a segment, each record's PHYSICALOFFSET its
 * position in the file, and a JSON description of every field. Fixed inputs: the output is the same on
 * every run. Each record is decoded again with MessageDecoder.decode and checked field by field.
 *
 * <pre>java Encode OUT.bin OUT.json</pre>
 */
public final class Encode {
    private static final long BORN = 1_700_000_000_000L;
    private static final InetSocketAddress STORE = address("198.51.100.7", 10911);

    private final ByteArrayOutputStream bin = new ByteArrayOutputStream();
    private final JsonArray described = new JsonArray();

    public static void main(String[] args) throws Exception {
        Encode e = new Encode();
        e.all();
        Files.write(Paths.get(args[0]), e.bin.toByteArray());
        JsonObject doc = new JsonObject();
        doc.addProperty("encoder", "org.apache.rocketmq.common.message.MessageDecoder.encode(MessageExt, false), RocketMQ "
            + org.apache.rocketmq.common.MQVersion.getVersionDesc(org.apache.rocketmq.common.MQVersion.CURRENT_VERSION));
        doc.addProperty("file", Paths.get(args[0]).getFileName().toString());
        doc.add("records", e.described);
        Gson gson = new GsonBuilder().setPrettyPrinting().disableHtmlEscaping().create();
        Files.write(Paths.get(args[1]), (gson.toJson(doc) + "\n").getBytes(StandardCharsets.UTF_8));
        System.out.println("   " + e.described.size() + " records, " + e.bin.size() + " bytes, decoded back by"
            + " MessageDecoder.decode: all fields equal");
    }

    private void all() throws Exception {
        MessageExt m;

        m = base("TopicTest", 0, 0, "Hello RocketMQ");
        m.setTags("TagA");
        m.setKeys("order-1 order-2");
        uniq(m, "C0000207000018B4AAC2163B6E340000");
        add("IPv4 hosts, tags, two keys, a unique key", m);

        m = base("TopicTest", 1, 7, "Grüße, 世界 🚀");
        m.setTags("标签");
        m.setKeys("ключ");
        MessageAccessor.putProperty(m, "region", "eu");
        MessageAccessor.putProperty(m, "note", "café ☕");
        uniq(m, "C0000207000018B4AAC2163B6E340001");
        add("non-ASCII body, tag, key and property values", m);

        m = base("TopicTest", 2, 0, "no properties at all");
        add("no properties (PROPERTIES length 0)", m);

        m = base("TopicTest", 3, 1, "");
        m.setTags("Empty");
        add("empty body (BODY length 0, CRC 0)", m);

        byte[] bytes = new byte[256];
        for (int i = 0; i < bytes.length; i++) bytes[i] = (byte) i;
        m = base("%RETRY%group-a", 0, 3, bytes);
        m.setFlag(0x7fffffff);
        m.setReconsumeTimes(3);
        MessageAccessor.putProperty(m, MessageConst.PROPERTY_RETRY_TOPIC, "TopicTest");
        MessageAccessor.putProperty(m, MessageConst.PROPERTY_DELAY_TIME_LEVEL, "5");
        uniq(m, "C0000207000018B4AAC2163B6E340002");
        add("binary body, flag, reconsume times, retry topic", m);

        m = base("SCHEDULE_TOPIC_XXXX", 2, 0, "delayed, level 3");
        m.setTags("TagD");
        MessageAccessor.putProperty(m, MessageConst.PROPERTY_DELAY_TIME_LEVEL, "3");
        MessageAccessor.putProperty(m, MessageConst.PROPERTY_REAL_TOPIC, "TopicTest");
        MessageAccessor.putProperty(m, MessageConst.PROPERTY_REAL_QUEUE_ID, "1");
        uniq(m, "C0000207000018B4AAC2163B6E340003");
        add("delayed message in SCHEDULE_TOPIC_XXXX", m);

        long halfOffset = bin.size();
        m = base("RMQ_SYS_TRANS_HALF_TOPIC", 0, 0, "order 42 paid");
        m.setKeys("txn-1");
        MessageAccessor.putProperty(m, MessageConst.PROPERTY_TRANSACTION_PREPARED, "true");
        MessageAccessor.putProperty(m, MessageConst.PROPERTY_PRODUCER_GROUP, "shop");
        MessageAccessor.putProperty(m, MessageConst.PROPERTY_REAL_TOPIC, "TopicTest");
        MessageAccessor.putProperty(m, MessageConst.PROPERTY_REAL_QUEUE_ID, "0");
        uniq(m, "C0000207000018B4AAC2163B6E340004");
        add("transaction half message", m);

        m = base("TopicTest", 0, 1, "order 42 paid");
        m.setKeys("txn-1");
        m.setSysFlag(MessageSysFlag.TRANSACTION_COMMIT_TYPE);
        m.setPreparedTransactionOffset(halfOffset);
        MessageAccessor.putProperty(m, MessageConst.PROPERTY_PRODUCER_GROUP, "shop");
        uniq(m, "C0000207000018B4AAC2163B6E340004");
        add("committed transaction message (sysflag 0x8, prepared transaction offset)", m);

        byte[] text = "compressible ".repeat(40).getBytes(StandardCharsets.UTF_8);
        m = base("TopicTest", 1, 8, CompressorFactory.getCompressor(CompressionType.ZLIB).compress(text, 5));
        m.setSysFlag(MessageSysFlag.COMPRESSED_FLAG);
        m.setTags("Zip");
        add("zlib-compressed body (sysflag 0x1; body CRC of the compressed bytes)", m);

        m = base("TopicTest", 2, 1, "born on IPv6");
        m.setBornHost(address("2001:db8::5", 40000));
        m.setBornHostV6Flag();
        m.setTags("V6");
        uniq(m, "C0000207000018B4AAC2163B6E340005");
        add("IPv6 born host (sysflag 0x10, 16-byte address)", m);

        m = base("TopicTest", 3, 2, "IPv6 both ways");
        m.setBornHost(address("2001:db8::5", 40001));
        m.setStoreHost(address("2001:db8::7", 10911));
        m.setBornHostV6Flag();
        m.setStoreHostAddressV6Flag();
        uniq(m, "C0000207000018B4AAC2163B6E340006");
        add("IPv6 born and store hosts (sysflag 0x30)", m);
    }

    private MessageExt base(String topic, int queueId, long queueOffset, String body) {
        return base(topic, queueId, queueOffset, body.getBytes(StandardCharsets.UTF_8));
    }

    private MessageExt base(String topic, int queueId, long queueOffset, byte[] body) {
        MessageExt m = new MessageExt();
        m.setTopic(topic);
        m.setQueueId(queueId);
        m.setQueueOffset(queueOffset);
        m.setBody(body);
        m.setBornTimestamp(BORN + bin.size());
        m.setStoreTimestamp(BORN + bin.size() + 5);
        m.setBornHost(address("192.0.2.10", 50123));
        m.setStoreHost(STORE);
        return m;
    }

    private static void uniq(MessageExt m, String id) {
        MessageAccessor.putProperty(m, MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, id);
    }

    private static InetSocketAddress address(String ip, int port) {
        try {
            return new InetSocketAddress(InetAddress.getByName(ip), port);
        } catch (Exception e) {
            throw new IllegalArgumentException(e);
        }
    }

    private void add(String what, MessageExt m) throws Exception {
        long offset = bin.size();
        m.setCommitLogOffset(offset);
        m.setBodyCRC(UtilAll.crc32(m.getBody())); // as CommitLog.asyncPutMessage sets it
        byte[] record = MessageDecoder.encode(m, false);
        bin.write(record);

        MessageExt back = MessageDecoder.decode(ByteBuffer.wrap(record), true, false, false);
        String propertiesString = MessageDecoder.messageProperties2String(m.getProperties());
        JsonObject o = new JsonObject();
        o.addProperty("what", what);
        o.addProperty("offset", offset);
        o.addProperty("totalSize", record.length);
        o.addProperty("magic", "0xdaa320a7");
        o.addProperty("bodyCRC", m.getBodyCRC());
        o.addProperty("queueId", m.getQueueId());
        o.addProperty("flag", m.getFlag());
        o.addProperty("queueOffset", m.getQueueOffset());
        o.addProperty("commitLogOffset", m.getCommitLogOffset());
        o.addProperty("sysFlag", m.getSysFlag());
        o.addProperty("bornTimestamp", m.getBornTimestamp());
        o.addProperty("bornHost", host(m.getBornHost()));
        o.addProperty("storeTimestamp", m.getStoreTimestamp());
        o.addProperty("storeHost", host(m.getStoreHost()));
        o.addProperty("reconsumeTimes", m.getReconsumeTimes());
        o.addProperty("preparedTransactionOffset", m.getPreparedTransactionOffset());
        o.addProperty("bodyBase64", Base64.getEncoder().encodeToString(m.getBody()));
        o.addProperty("topic", m.getTopic());
        o.addProperty("propertiesString", propertiesString);
        o.add("properties", new Gson().toJsonTree(m.getProperties() == null ? new TreeMap<>() : new TreeMap<>(m.getProperties())));
        o.addProperty("msgId", back.getMsgId());
        described.add(o);

        boolean same = back.getStoreSize() == record.length && back.getTopic().equals(m.getTopic())
            && back.getQueueId() == m.getQueueId() && back.getQueueOffset() == m.getQueueOffset()
            && back.getCommitLogOffset() == offset && back.getFlag() == m.getFlag() && back.getSysFlag() == m.getSysFlag()
            && back.getBornTimestamp() == m.getBornTimestamp() && back.getBornHost().equals(m.getBornHost())
            && back.getStoreTimestamp() == m.getStoreTimestamp() && back.getStoreHost().equals(m.getStoreHost())
            && back.getReconsumeTimes() == m.getReconsumeTimes() && back.getBodyCRC() == m.getBodyCRC()
            && back.getPreparedTransactionOffset() == m.getPreparedTransactionOffset()
            && Arrays.equals(back.getBody() == null ? new byte[0] : back.getBody(), m.getBody())
            && java.util.Objects.equals(back.getProperties(), m.getProperties());
        if (!same) {
            throw new IllegalStateException("MessageDecoder.decode does not give back record " + what);
        }
    }

    private static String host(java.net.SocketAddress address) {
        InetSocketAddress a = (InetSocketAddress) address;
        String ip = a.getAddress().getHostAddress();
        return (ip.contains(":") ? "[" + ip + "]" : ip) + ":" + a.getPort();
    }
}
