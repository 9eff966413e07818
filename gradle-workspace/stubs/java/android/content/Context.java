package android.content;

import android.content.pm.PackageManager;
import android.content.res.AssetManager;
import android.content.res.Resources;
import android.os.Looper;
import java.io.File;
import java.io.FileInputStream;
import java.io.FileNotFoundException;
import java.io.FileOutputStream;
import java.util.concurrent.Executor;

public abstract class Context {
    public static final int MODE_PRIVATE = 0;
    public static final int MODE_APPEND = 32768;
    public static final String ACTIVITY_SERVICE = "activity";
    public static final String CONNECTIVITY_SERVICE = "connectivity";
    public static final String LAYOUT_INFLATER_SERVICE = "layout_inflater";
    public static final String INPUT_METHOD_SERVICE = "input_method";
    public Context() { throw new RuntimeException("Stub!"); }
    public abstract Context getApplicationContext();
    public abstract String getPackageName();
    public abstract Looper getMainLooper();
    public Executor getMainExecutor() { throw new RuntimeException("Stub!"); }
    public abstract File getFilesDir();
    public abstract File getCacheDir();
    public abstract File getDataDir();
    public abstract File getNoBackupFilesDir();
    public abstract File getExternalCacheDir();
    public abstract File getExternalFilesDir(String type);
    public abstract File getDir(String name, int mode);
    public abstract File getDatabasePath(String name);
    public abstract String[] databaseList();
    public abstract String[] fileList();
    public abstract boolean deleteFile(String name);
    public abstract FileInputStream openFileInput(String name) throws FileNotFoundException;
    public abstract FileOutputStream openFileOutput(String name, int mode) throws FileNotFoundException;
    public abstract SharedPreferences getSharedPreferences(String name, int mode);
    public abstract Resources getResources();
    public abstract ContentResolver getContentResolver();
    public abstract Object getSystemService(String name);
    public final <T> T getSystemService(Class<T> serviceClass) { throw new RuntimeException("Stub!"); }
    public final String getString(int resId) { throw new RuntimeException("Stub!"); }
    public final String getString(int resId, Object... formatArgs) { throw new RuntimeException("Stub!"); }
    public final CharSequence getText(int resId) { throw new RuntimeException("Stub!"); }
    public abstract void startActivity(Intent intent);
    public abstract ComponentName startService(Intent service);
    public abstract boolean stopService(Intent service);
    public abstract void sendBroadcast(Intent intent);
    public abstract int checkSelfPermission(String permission);
    public AssetManager getAssets() { throw new RuntimeException("Stub!"); }
    public PackageManager getPackageManager() { throw new RuntimeException("Stub!"); }
    public Resources.Theme getTheme() { throw new RuntimeException("Stub!"); }
    public Intent registerReceiver(BroadcastReceiver receiver, IntentFilter filter) { throw new RuntimeException("Stub!"); }
    public Intent registerReceiver(BroadcastReceiver receiver, IntentFilter filter, int flags) { throw new RuntimeException("Stub!"); }
    public void unregisterReceiver(BroadcastReceiver receiver) { throw new RuntimeException("Stub!"); }
}
