package android.content.res;

import java.io.IOException;
import java.io.InputStream;

public final class AssetManager implements AutoCloseable {
    AssetManager() { throw new RuntimeException("Stub!"); }
    public InputStream open(String fileName) throws IOException { throw new RuntimeException("Stub!"); }
    public String[] list(String path) throws IOException { throw new RuntimeException("Stub!"); }
    @Override public void close() { throw new RuntimeException("Stub!"); }
}
