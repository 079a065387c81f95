/*
 * JMeterLauncher.java - starts Debian 12's JMeter (2.13) so that it can
 * load a test plan at all.
 *
 * JMeter 2.13 predates XStream's allow-list of types; Debian 12 pairs it
 * with libxstream-java 1.4.20, whose allow-list is on by default, so
 * `jmeter -n -t any.jmx` fails with "ForbiddenClassException:
 * org.apache.jmeter.save.ScriptWrapper" (the templates shipped with the
 * package too). This launcher allows every type on JMeter's own XStream
 * instances, as JMeter 5 does itself, and then runs JMeter with the given
 * arguments, as its launcher would. Run as a source file (JDK 11 and up):
 *
 *   java -cp "/usr/share/jmeter/bin/ApacheJMeter.jar:/usr/share/jmeter/lib/*:/usr/share/jmeter/lib/ext/*" \
 *     -Djmeter.home=/usr/share/jmeter bench/jmeter/JMeterLauncher.java \
 *     -n -t bench/jmeter/seckill.jmx ...
 *
 * Test plans are trusted input here (our own), which is what the allow-list
 * would otherwise guard against.
 */
import com.thoughtworks.xstream.XStream;
import com.thoughtworks.xstream.security.AnyTypePermission;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;

public final class JMeterLauncher {
    public static void main(String[] args) throws Exception {
        String home = System.getProperty("jmeter.home", "/usr/share/jmeter");
        // SaveService reads saveservice.properties when it is first used.
        org.apache.jmeter.util.JMeterUtils.setJMeterHome(home);
        org.apache.jmeter.util.JMeterUtils.loadJMeterProperties(
            home + "/bin/jmeter.properties");
        Class<?> save = Class.forName("org.apache.jmeter.save.SaveService");
        int n = 0;
        for (Field f : save.getDeclaredFields()) {
            if (Modifier.isStatic(f.getModifiers())
                && XStream.class.isAssignableFrom(f.getType())) {
                f.setAccessible(true);
                ((XStream) f.get(null)).addPermission(AnyTypePermission.ANY);
                n++;
            }
        }
        if (n == 0)
            throw new IllegalStateException("no XStream in SaveService");
        new org.apache.jmeter.JMeter().start(args);
    }
}
