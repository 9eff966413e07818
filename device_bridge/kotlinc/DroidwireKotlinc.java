import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

import org.jetbrains.kotlin.cli.common.ExitCode;
import org.jetbrains.kotlin.cli.jvm.K2JVMCompiler;

/**
 * droidwire's warm Kotlin compiler: one JVM, many compiles (device_bridge/kotlinc/service.py).
 *
 * Protocol on stdin/stdout, one request at a time:
 *   request:  a line with the argument count N, then N lines, one kotlinc argument each
 *   response: "RESULT <exit code> <byte count>\n" followed by that many bytes of UTF-8
 *             compiler output (GradleStyle messages: the JVM runs with
 *             -Dorg.jetbrains.kotlin.cliMessageRenderer=GradleStyle)
 * Ready is announced with "READY <kotlin version>\n". Anything the compiler prints on
 * System.out/err outside the captured stream is dropped, so it cannot corrupt the protocol.
 */
public final class DroidwireKotlinc {
    public static void main(String[] argv) throws Exception {
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), false, "UTF-8");
        PrintStream sink = new PrintStream(OutputStream.nullOutputStream());
        System.setOut(sink);
        System.setErr(sink);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        out.print("READY " + kotlinVersion() + "\n");
        out.flush();
        String line;
        while ((line = in.readLine()) != null) {
            line = line.trim();
            if (line.isEmpty()) {
                continue;
            }
            int n = Integer.parseInt(line);
            String[] args = new String[n];
            for (int i = 0; i < n; i++) {
                String arg = in.readLine();
                if (arg == null) {
                    return;
                }
                args[i] = arg;
            }
            ByteArrayOutputStream buffer = new ByteArrayOutputStream();
            PrintStream messages = new PrintStream(buffer, true, "UTF-8");
            int code;
            try {
                ExitCode exit = new K2JVMCompiler().exec(messages, args);
                code = exit.getCode();
            } catch (Throwable t) {
                t.printStackTrace(messages);
                code = 3;
            }
            messages.flush();
            byte[] bytes = buffer.toByteArray();
            out.print("RESULT " + code + " " + bytes.length + "\n");
            out.write(bytes);
            out.flush();
        }
    }

    private static String kotlinVersion() {
        try {
            return kotlin.KotlinVersion.CURRENT.toString();
        } catch (Throwable t) {
            return "unknown";
        }
    }
}
