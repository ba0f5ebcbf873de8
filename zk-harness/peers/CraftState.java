// Writes a ZooKeeper snapshot holding crafted nodes, with the server's own classes, for
// zk-harness (`zk_harness::peers::craft_state`): states that take billions of writes to
// reach through the API (a data version at -1 or at Integer.MAX_VALUE, a parent's child
// counter near its end).
//
//   java -cp <classes>:<zookeeper jars> CraftState <data dir>  < spec
//
// One node per stdin line, tab-separated: path, data as hex (may be empty), data version,
// child version (cversion; "-" keeps it). Missing parents are created empty. The snapshot
// goes to <data dir>/version-2, which must hold no other snapshot or log.

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.server.DataTree;
import org.apache.zookeeper.server.persistence.FileTxnSnapLog;

public final class CraftState {
    public static void main(String[] args) throws Exception {
        File dir = new File(args[0]);
        DataTree tree = new DataTree();
        long zxid = 0;
        long now = System.currentTimeMillis();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) {
                continue;
            }
            String[] f = line.split("\t", -1);
            String path = f[0];
            byte[] data = hex(f[1]);
            int version = Integer.parseInt(f[2]);
            // Parents first, empty.
            int at = 0;
            while ((at = path.indexOf('/', at + 1)) > 0) {
                zxid = create(tree, path.substring(0, at), new byte[0], zxid, now);
            }
            zxid = create(tree, path, data, zxid, now);
            tree.setData(path, data, version, ++zxid, now);
            if (!f[3].equals("-")) {
                tree.setCversionPzxid(path, Integer.parseInt(f[3]), ++zxid);
            }
        }
        tree.lastProcessedZxid = zxid;
        FileTxnSnapLog snapLog = new FileTxnSnapLog(dir, dir);
        snapLog.save(tree, new ConcurrentHashMap<>(), true);
        snapLog.close();
        System.out.println("OK " + zxid);
    }

    private static long create(DataTree tree, String path, byte[] data, long zxid, long now)
            throws Exception {
        if (tree.getNode(path) != null) {
            return zxid;
        }
        String parent = path.substring(0, Math.max(path.lastIndexOf('/'), 1));
        int parentCversion = tree.getNode(parent).stat.getCversion() + 1;
        tree.createNode(path, data, ZooDefs.Ids.OPEN_ACL_UNSAFE, 0, parentCversion, zxid + 1, now);
        return zxid + 1;
    }

    private static byte[] hex(String text) {
        byte[] out = new byte[text.length() / 2];
        for (int i = 0; i < out.length; i++) {
            out[i] = (byte) Integer.parseInt(text.substring(2 * i, 2 * i + 2), 16);
        }
        return out;
    }
}
