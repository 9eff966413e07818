package android.content;

public abstract class ContentResolver {
    public ContentResolver(Context context) { throw new RuntimeException("Stub!"); }
}
