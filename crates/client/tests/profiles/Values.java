// Java's side of tests/profiles.rs: xmemcached (its SerializingTranscoder, the same flags as
// spymemcached's) writes every type, plain and compressed, or reads what mnemo wrote. Run in
// the JDK's source-file mode with xmemcached and slf4j-api on the class path:
//   java -cp CP Values.java write HOST:PORT PREFIX
//       prints key TAB java TAB kind TAB compressed(0/1) TAB hex(payload)
//   java -cp CP Values.java read HOST:PORT KEYFILE
//       prints key TAB java TAB class TAB hex(payload)
// kind: text, bytes, int (Integer, Long, Byte, Date: decimal), float (Float, Double: decimal),
// bool ("1"/"0"), ser:java (payload: the object's Java serialization).
import java.io.ByteArrayOutputStream;
import java.io.ObjectOutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Date;
import net.rubyeye.xmemcached.XMemcachedClient;

public class Values {
    static String hex(byte[] b) {
        StringBuilder s = new StringBuilder();
        for (byte x : b) s.append(String.format("%02x", x & 0xff));
        return s.toString();
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static byte[] serialized(Object o) throws Exception {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        try (ObjectOutputStream os = new ObjectOutputStream(out)) {
            os.writeObject(o);
        }
        return out.toByteArray();
    }

    static String words(int n) {
        StringBuilder s = new StringBuilder();
        String[] w = {"alpha", "brävo", "charlie", "delta"};
        for (int i = 0; s.length() < n; i++) s.append(w[i % 4]).append(' ').append(i).append(' ');
        return s.toString();
    }

    public static void main(String[] args) throws Exception {
        String[] hp = args[1].split(":");
        XMemcachedClient c = new XMemcachedClient(hp[0], Integer.parseInt(hp[1]));
        try {
            if (args[0].equals("write")) write(c, args[2]);
            else read(c, Path.of(args[2]));
        } finally {
            c.shutdown();
        }
    }

    static void out(String key, String kind, boolean compressed, byte[] payload) {
        System.out.println(key + "\tjava\t" + kind + "\t" + (compressed ? 1 : 0) + "\t" + hex(payload));
    }

    static void write(XMemcachedClient c, String prefix) throws Exception {
        String longText = words(40000);
        byte[] longBytes = utf8(words(40000) + "\u0000");
        ArrayList<String> list = new ArrayList<>(Arrays.asList("a", "b"));
        ArrayList<String> longList = new ArrayList<>(Arrays.asList(longText, longText));
        Object[][] cases = {
            {"str", "héllo wörld", "text", false, utf8("héllo wörld")},
            {"bytes", new byte[] {0, 1, (byte) 0xff}, "bytes", false, new byte[] {0, 1, (byte) 0xff}},
            {"int", 42, "int", false, utf8("42")},
            {"negint", -7, "int", false, utf8("-7")},
            {"long", 1L << 40, "int", false, utf8(Long.toString(1L << 40))},
            {"neglong", Long.MIN_VALUE, "int", false, utf8(Long.toString(Long.MIN_VALUE))},
            {"byte", (byte) -5, "int", false, utf8("-5")},
            {"date", new Date(1700000000123L), "int", false, utf8("1700000000123")},
            {"float", 0.25f, "float", false, utf8("0.25")},
            {"double", 0.1, "float", false, utf8("0.1")},
            {"true", true, "bool", false, utf8("1")},
            {"false", false, "bool", false, utf8("0")},
            {"list", list, "ser:java", false, serialized(list)},
            {"longtext", longText, "text", true, utf8(longText)},
            {"longbytes", longBytes, "bytes", true, longBytes},
            {"longlist", longList, "ser:java", true, serialized(longList)},
        };
        for (Object[] k : cases) {
            String key = prefix + "j:" + k[0];
            if (!c.set(key, 0, k[1])) throw new RuntimeException("set " + key);
            out(key, (String) k[2], (Boolean) k[3], (byte[]) k[4]);
        }
    }

    static void read(XMemcachedClient c, Path keyfile) throws Exception {
        for (String key : Files.readAllLines(keyfile)) {
            if (key.isEmpty()) continue;
            Object v = c.get(key);
            String cls = v == null ? "miss" : v.getClass().getSimpleName();
            byte[] p;
            if (v instanceof byte[]) p = (byte[]) v;
            else if (v instanceof Boolean) p = utf8((Boolean) v ? "1" : "0");
            else p = utf8(String.valueOf(v));
            System.out.println(key + "\tjava\t" + cls + "\t" + hex(p));
        }
    }
}
