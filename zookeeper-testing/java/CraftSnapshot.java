// Writes a ZooKeeper snapshot holding crafted znodes, using the server's own classes, so
// that a normal server started on the data dir serves exactly those nodes and counters.
//
// Compiled and run by zk-harness (src/edge.rs) at test time against Debian's
// /usr/share/java/zookeeper.jar:
//
//     java -cp CLASSES:SERVER_CLASSPATH CraftSnapshot DATA_DIR SPEC_FILE
//
// SPEC_FILE has one line per node, tab-separated, path and data hex-encoded (so any byte
// may appear in them):
//
//     node <hex path> <hex data> <data version> <stored cversion> <acl version>
//
// Missing ancestors are created with zero counters. All nodes are created first and their
// counters set afterwards, because creating a child bumps its parent's cversion.
//
// The stored cversion is the counter a sequential child's name is formatted from (`%010d`);
// clients do not see it directly (DataNode.copyStat reports 2 * cversion - numChildren).
// Counters are set between the node map's preChange/postChange hooks, as the server's own
// updates are, so the tree's running digest stays that of its nodes. (The snapshot's
// zxid digest is written empty, as for any tree that processed no transaction; the
// server then takes the digest it computes from the loaded nodes.) After saving, the
// snapshot is loaded back into a fresh tree and every crafted field and the tree digest
// are compared with what was crafted.

import java.io.File;
import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.data.StatPersisted;
import org.apache.zookeeper.server.DataNode;
import org.apache.zookeeper.server.DataTree;
import org.apache.zookeeper.server.NodeHashMap;
import org.apache.zookeeper.server.persistence.FileTxnSnapLog;

public final class CraftSnapshot {
    private static final class Spec {
        String path;
        byte[] data;
        int version;
        int cversion;
        int aversion;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: CraftSnapshot DATA_DIR SPEC_FILE");
            System.exit(2);
        }
        File dataDir = new File(args[0]);
        List<Spec> specs = parse(Files.readAllLines(Paths.get(args[1]), StandardCharsets.UTF_8));

        DataTree tree = new DataTree();
        long time = System.currentTimeMillis();
        long zxid = 0;
        for (Spec s : specs) {
            zxid = ensure(tree, s.path, zxid, time);
        }
        NodeHashMap nodes = nodeMap(tree);
        for (Spec s : specs) {
            zxid++;
            // setData keeps the tree's size accounting right and takes the version as is.
            tree.setData(s.path, s.data, s.version, zxid, time);
            DataNode node = tree.getNode(s.path);
            synchronized (node) {
                nodes.preChange(s.path, node);
                node.stat.setCversion(s.cversion);
                node.stat.setAversion(s.aversion);
                nodes.postChange(s.path, node);
            }
        }
        tree.lastProcessedZxid = zxid;

        FileTxnSnapLog snapLog = new FileTxnSnapLog(dataDir, dataDir);
        snapLog.save(tree, new ConcurrentHashMap<>(), true);
        snapLog.close();

        verify(dataDir, tree, specs);
        System.out.println("CraftSnapshot: wrote " + specs.size() + " crafted node(s) at zxid 0x"
                + Long.toHexString(zxid) + " into " + dataDir);
    }

    /** Loads the snapshot back into a fresh tree and compares it with what was crafted. */
    private static void verify(File dataDir, DataTree crafted, List<Spec> specs) throws Exception {
        DataTree loaded = new DataTree();
        FileTxnSnapLog snapLog = new FileTxnSnapLog(dataDir, dataDir);
        snapLog.restore(loaded, new ConcurrentHashMap<>(), (hdr, rec, digest) -> { });
        snapLog.close();
        for (Spec s : specs) {
            DataNode node = loaded.getNode(s.path);
            if (node == null) {
                fail(s.path + " is missing from the written snapshot");
            }
            StatPersisted st = node.stat;
            if (st.getVersion() != s.version || st.getCversion() != s.cversion
                    || st.getAversion() != s.aversion || !Arrays.equals(node.getData(), s.data)) {
                fail(s.path + " reads back as version=" + st.getVersion() + " cversion="
                        + st.getCversion() + " aversion=" + st.getAversion() + " data length="
                        + (node.getData() == null ? 0 : node.getData().length)
                        + ", crafted version=" + s.version + " cversion=" + s.cversion
                        + " aversion=" + s.aversion + " data length=" + s.data.length);
            }
            System.out.println("CraftSnapshot: " + s.path + " version=" + st.getVersion()
                    + " cversion=" + st.getCversion() + " aversion=" + st.getAversion()
                    + " data bytes=" + s.data.length);
        }
        if (loaded.getTreeDigest() != crafted.getTreeDigest()) {
            fail("tree digest " + loaded.getTreeDigest() + " after loading differs from "
                    + crafted.getTreeDigest() + " when written");
        }
    }

    /** Creates `path` and its missing ancestors; returns the last zxid used. */
    private static long ensure(DataTree tree, String path, long zxid, long time) throws Exception {
        if (tree.getNode(path) != null) {
            return zxid;
        }
        int slash = path.lastIndexOf('/');
        String parent = slash == 0 ? "/" : path.substring(0, slash);
        zxid = ensure(tree, parent, zxid, time);
        zxid++;
        tree.createNode(path, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, 0, -1, zxid, time);
        return zxid;
    }

    /** The tree's node map, for the digest hooks around a stat change. */
    private static NodeHashMap nodeMap(DataTree tree) throws Exception {
        Field f = DataTree.class.getDeclaredField("nodes");
        f.setAccessible(true);
        return (NodeHashMap) f.get(tree);
    }

    private static List<Spec> parse(List<String> lines) {
        List<Spec> specs = new ArrayList<>();
        int n = 0;
        for (String line : lines) {
            n++;
            if (line.isEmpty()) {
                continue;
            }
            String[] f = line.split("\t", -1);
            if (f.length != 6 || !f[0].equals("node")) {
                fail("spec line " + n + " is malformed: " + line);
            }
            Spec s = new Spec();
            s.path = new String(unhex(f[1]), StandardCharsets.UTF_8);
            s.data = unhex(f[2]);
            s.version = Integer.parseInt(f[3]);
            s.cversion = Integer.parseInt(f[4]);
            s.aversion = Integer.parseInt(f[5]);
            specs.add(s);
        }
        return specs;
    }

    private static byte[] unhex(String hex) {
        byte[] out = new byte[hex.length() / 2];
        for (int i = 0; i < out.length; i++) {
            out[i] = (byte) Integer.parseInt(hex.substring(2 * i, 2 * i + 2), 16);
        }
        return out;
    }

    private static void fail(String message) {
        System.err.println("CraftSnapshot: " + message);
        System.exit(1);
    }
}
