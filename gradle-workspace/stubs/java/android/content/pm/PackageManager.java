package android.content.pm;

public abstract class PackageManager {
    public static final int PERMISSION_GRANTED = 0;
    public static final int PERMISSION_DENIED = -1;
    public PackageManager() { throw new RuntimeException("Stub!"); }
    public abstract boolean hasSystemFeature(String featureName);
}
