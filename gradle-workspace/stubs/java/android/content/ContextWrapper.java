package android.content;

import android.content.res.Resources;
import android.os.Looper;
import java.io.File;
import java.io.FileInputStream;
import java.io.FileNotFoundException;
import java.io.FileOutputStream;

public class ContextWrapper extends Context {
    public ContextWrapper(Context base) { throw new RuntimeException("Stub!"); }
    public Context getBaseContext() { throw new RuntimeException("Stub!"); }
    @Override public Context getApplicationContext() { throw new RuntimeException("Stub!"); }
    @Override public String getPackageName() { throw new RuntimeException("Stub!"); }
    @Override public Looper getMainLooper() { throw new RuntimeException("Stub!"); }
    @Override public File getFilesDir() { throw new RuntimeException("Stub!"); }
    @Override public File getCacheDir() { throw new RuntimeException("Stub!"); }
    @Override public File getDataDir() { throw new RuntimeException("Stub!"); }
    @Override public File getNoBackupFilesDir() { throw new RuntimeException("Stub!"); }
    @Override public File getExternalCacheDir() { throw new RuntimeException("Stub!"); }
    @Override public File getExternalFilesDir(String type) { throw new RuntimeException("Stub!"); }
    @Override public File getDir(String name, int mode) { throw new RuntimeException("Stub!"); }
    @Override public File getDatabasePath(String name) { throw new RuntimeException("Stub!"); }
    @Override public String[] databaseList() { throw new RuntimeException("Stub!"); }
    @Override public String[] fileList() { throw new RuntimeException("Stub!"); }
    @Override public boolean deleteFile(String name) { throw new RuntimeException("Stub!"); }
    @Override public FileInputStream openFileInput(String name) throws FileNotFoundException { throw new RuntimeException("Stub!"); }
    @Override public FileOutputStream openFileOutput(String name, int mode) throws FileNotFoundException { throw new RuntimeException("Stub!"); }
    @Override public SharedPreferences getSharedPreferences(String name, int mode) { throw new RuntimeException("Stub!"); }
    @Override public Resources getResources() { throw new RuntimeException("Stub!"); }
    @Override public ContentResolver getContentResolver() { throw new RuntimeException("Stub!"); }
    @Override public Object getSystemService(String name) { throw new RuntimeException("Stub!"); }
    @Override public void startActivity(Intent intent) { throw new RuntimeException("Stub!"); }
    @Override public ComponentName startService(Intent service) { throw new RuntimeException("Stub!"); }
    @Override public boolean stopService(Intent service) { throw new RuntimeException("Stub!"); }
    @Override public void sendBroadcast(Intent intent) { throw new RuntimeException("Stub!"); }
    @Override public int checkSelfPermission(String permission) { throw new RuntimeException("Stub!"); }
}
